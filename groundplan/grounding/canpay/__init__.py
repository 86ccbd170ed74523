"""SayCanPay's learned grounding (Hazra et al., Sec. 6) in one package: the typed configs of its models,
training and sources (``config``), the trajectory reader and the training examples it makes
(``data``: Sec. 6.1's contrastive Can examples, Sec. 6.2's discounted-return Pay targets, App. A.1's
few-shot prompt), the network with its saving and loading (``model``) and the losses (``losses``).
The grounding sources that serve the trained models to planners are in
:mod:`groundplan.grounding.saycanpay`; the Ray Train loop is ``groundplan.pipelines.train.canpay``.
"""
