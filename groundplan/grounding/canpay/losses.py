"""SayCanPay's training objectives and the Can model's validation metric: InfoNCE over (positive,
same-trajectory negative, other-trajectory negative) for Can (Eq. 8, with an optional pointwise BCE that
anchors the sigmoid), MSE onto the discounted return for Pay (Sec. 6.2), F1 of the positive class."""
from __future__ import annotations

from typing import Sequence


def info_nce_loss(logits, bce_weight: float = 0.0):
    """Eq. 8 with M^can = exp(logit): cross-entropy of the positive (column 0) against the negatives of
    each row of ``logits`` [B, 3]; plus ``bce_weight`` × BCE(sigmoid(logit), [1, 0, 0])."""
    import torch
    import torch.nn.functional as F

    target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    loss = F.cross_entropy(logits, target)
    if bce_weight > 0:
        labels = torch.zeros_like(logits)
        labels[:, 0] = 1.0
        loss = loss + bce_weight * F.binary_cross_entropy_with_logits(logits, labels)
    return loss


def pay_loss(logits, targets):
    """Sec. 6.2: MSE between sigmoid(logit) (a payoff bounded in [0, 1]) and the discounted return."""
    import torch

    return torch.mean((torch.sigmoid(logits) - targets) ** 2)


def f1_score(labels: Sequence[int], predicted: Sequence[int]) -> float:
    """F1 of the positive class (the Can model's validation metric, Sec. 6.1)."""
    tp = sum(1 for y, p in zip(labels, predicted) if y and p)
    fp = sum(1 for y, p in zip(labels, predicted) if not y and p)
    fn = sum(1 for y, p in zip(labels, predicted) if y and not p)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)
