"""The Embodied Agent Interface's VirtualHome action-sequencing tasks (Li et al., NeurIPS 2024 D&B, Sec. 3.3):
the task set with EAI's own inputs (:mod:`.tasks`), the stored prompts and action vocabulary
(:mod:`.prompts`) and EAI's goal check in both of its readings (:mod:`.goals`). The judge that scores
outputs on these tasks is :mod:`groundplan.evaluation.eai`."""
