"""Zero-Shot Planners' translation to admissible actions (Huang et al., 2022, Sec. 3.2 and 3.3).

Each sampled step â is mapped to an admissible action a by the translation LM's embeddings f; the
(sample, action) pair is scored

    score(â, a) = cos(f(â), f(a)) + β · P(â)                                            (Sec. 3.2)

with P(â) the planning LM's mean token log-prob of the sample (β = 0.3 in the paper), and the authors'
code subtracts a penalty of 0.5 from the previous action so the plan does not loop. The best action
over all samples is the step; its score is compared with the stopping threshold ε.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from groundplan.grounding.action_index import ActionIndex


def translation_scores(
    index: ActionIndex, sample_vectors: np.ndarray, logprobs: np.ndarray, beta: float, previous: str | None,
    penalty: float, admissible: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best score of every action of ``index`` over the samples, the cosine and the sample achieving it:
    ``max_s cos(f(s), f(a)) + β·P(s)`` minus ``penalty`` for the previous action; actions that
    ``admissible`` (an ``Observation.admissible`` mask) rules out score -inf (and are not embedded)."""
    mask = index.ensure(admissible)
    samples = torch.from_numpy(np.ascontiguousarray(sample_vectors, dtype=np.float32))
    cos = index.matrix_t @ samples.T  # (actions, samples)
    scores = cos + beta * torch.from_numpy(np.asarray(logprobs, dtype=np.float32))[None, :]
    best_t, best_sample_t = scores.max(dim=1)
    best = best_t.numpy()
    best_sample = best_sample_t.numpy()
    if previous is not None and penalty:
        i = index.position.get(previous)
        if i is not None:
            best[i] -= penalty
    if mask is not None:
        best[~mask] = -np.inf
    return best, cos.gather(1, best_sample_t[:, None])[:, 0].numpy(), best_sample
