"""VirtualHome through the evolving-graph simulator of ``virtualhome-eval`` (pip extra ``virtualhome``).

Modules: :mod:`.actions` (templates, action space, NL ↔ script), :mod:`.simulator` (the package's
executor, instance assignment, goal checks), :mod:`.dataset` (programs, goals, split), :mod:`.env`
(:class:`~groundplan.envs.virtualhome.env.VirtualHomeEnv`), :mod:`.affordance` (precondition
affordance for SayCan).
"""
