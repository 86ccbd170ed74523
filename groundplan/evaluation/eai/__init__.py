"""EAI's action-sequencing metrics (Li et al., NeurIPS 2024 D&B, Sec. 3.3) as a groundplan judge: the
two semantics and their corrections (:mod:`.semantics`), output parsing (:mod:`.parse`), the per-task
verdict (:mod:`.judge`) and the per-model table (:mod:`.table`). The tasks are
:mod:`groundplan.envs.virtualhome.eai`."""
