"""Token-level diverse (group) beam search on the engine's own forward passes (SayCanPay's Say step).

SayCanPay (Hazra et al., Sec. 5 and App. A, Table 7) proposes m = 6 candidate actions per step with a
beam search over tokens split into 3 groups with diversity penalty 2.0 and at most 10 new tokens.
That is Vijayakumar et al.'s diverse beam search with Hamming diversity, as transformers implemented
it before v5 moved it to a Hub repository (unreachable here). This module re-implements it:

- ``num_beams`` beams in ``num_groups`` groups of ``G = num_beams / num_groups``; at the first step
  only the first beam of each group is live (the others start at -1e9), as in transformers.
- At every step the groups are expanded in order. For group g, a token's log-prob is lowered by
  ``diversity_penalty × (how many beams of groups < g chose that token at this step)``; the beam's
  running (penalised) score is added; the top ``2G`` (beam, token) pairs are taken in order, and a pair
  whose token is EOS or whose text now contains a stop string becomes a finished hypothesis, the
  others the group's next beams until G are kept.
- A finished hypothesis is ranked by its length-normalised score, penalised sum / tokens^length_penalty
  (transformers' BeamHypotheses); a group is done once it holds G hypotheses (early stopping); at
  ``max_new_tokens`` the running beams are finished as they are ("length").
- Each candidate carries the model's own log-probability of its tokens (no diversity penalty) —
  ``logprob_sum`` and the length-normalised ``logprob_mean`` — which the planner uses as p_say, and the
  ranking ``score``. The stop string's token (e.g. the newline ending an action) counts: p(action)
  includes the probability of ending it there.

Forward passes: the prompt's key/values come from the engine's prefix cache (``_context``); every
step then runs one forward over the ``num_beams`` new tokens, appended as columns to the same cache
buffers, with a tree-attention mask (each new token sees the prompt and the columns of its own
ancestors), so beams are re-ordered without copying any key/values. :func:`reference_beam_search`
runs the same search with one full uncached forward per beam and step (the test oracle).

Planners call :func:`propose`, which uses the language model's ``beam_candidates`` method (the
``SupportsBeamSearch`` protocol), so they never depend on the backend.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from groundplan.core.errors import InvalidInputError
from groundplan.llm.sampling import find_stop

_NEG = -1e9


@dataclass(frozen=True)
class BeamSearchParams:
    """Table 7's defaults: 6 beams (= candidates m), 3 groups, diversity penalty 2.0, 10 new tokens."""

    num_beams: int = 6
    num_groups: int = 3
    diversity_penalty: float = 2.0
    max_new_tokens: int = 10
    length_penalty: float = 1.0
    stop: tuple[str, ...] = ("\n",)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(s for s in (self.stop or ()) if s))
        if self.num_beams < 1 or self.num_groups < 1 or self.num_beams % self.num_groups:
            raise InvalidInputError(f"num_beams ({self.num_beams}) must be a positive multiple of num_groups ({self.num_groups})")
        if self.max_new_tokens < 1 or self.diversity_penalty < 0:
            raise InvalidInputError("beam search needs max_new_tokens >= 1 and diversity_penalty >= 0")


@dataclass(frozen=True)
class BeamCandidate:
    """One finished hypothesis: its text (cut at the stop string), the model's own log-prob of its
    tokens, the ranking score (penalised, length-normalised) and which group found it."""

    text: str
    logprob_sum: float
    num_tokens: int
    score: float
    group: int
    finish_reason: str  # "stop" (EOS or a stop string) or "length"

    @property
    def logprob_mean(self) -> float:
        return self.logprob_sum / max(self.num_tokens, 1)


@runtime_checkable
class SupportsBeamSearch(Protocol):
    """A language model that proposes candidates by diverse beam search."""

    def beam_candidates(self, prompt: str, params: BeamSearchParams) -> list[BeamCandidate]:
        ...


def propose(lm: Any, prompt: str, params: BeamSearchParams) -> list[BeamCandidate]:
    """Candidates of ``lm`` after ``prompt``; the backend must implement ``beam_candidates``."""
    if not isinstance(lm, SupportsBeamSearch):
        raise InvalidInputError(f"the language model '{getattr(lm, 'name', lm)}' cannot propose candidates by beam "
                                "search (no beam_candidates method); use the 'hf' backend")
    return lm.beam_candidates(prompt, params)


# ------------------------------------------------------------------------------------ the search
#: step function: (token paths of the new beams, parent beam index of each, new token of each) -> [nb, V] log-probs
StepFn = Callable[[list[list[int]], list[int], list[int]], "np.ndarray"]


@dataclass
class _Hyp:
    tokens: list[int]
    penalised: float  # running sum of diversity-penalised log-probs (transformers' beam score)
    logprob: float  # running sum of the model's own log-probs


def _search(first_lp: np.ndarray, step: StepFn, params: BeamSearchParams, eos: set[int],
            decode: Callable[[list[int]], str]) -> list[BeamCandidate]:
    """Diverse beam search given the log-probs after the prompt and a step function (module doc)."""
    nb, ng = params.num_beams, params.num_groups
    gs = nb // ng
    vocab = first_lp.shape[-1]
    beams = [_Hyp([], 0.0 if b % gs == 0 else _NEG, 0.0) for b in range(nb)]
    finished: list[list[tuple[float, int, BeamCandidate]]] = [[] for _ in range(ng)]  # min-heaps by score
    done = [False] * ng
    lp = np.repeat(first_lp[None, :], nb, axis=0)
    counter = 0

    def add(group: int, hyp: _Hyp, text: str, reason: str) -> None:
        nonlocal counter
        n = max(len(hyp.tokens), 1)
        cand = BeamCandidate(text=text, logprob_sum=hyp.logprob, num_tokens=len(hyp.tokens),
                             score=hyp.penalised / (n ** params.length_penalty), group=group, finish_reason=reason)
        counter += 1
        heap = finished[group]
        if len(heap) < gs:
            heapq.heappush(heap, (cand.score, -counter, cand))
        elif cand.score > heap[0][0]:
            heapq.heapreplace(heap, (cand.score, -counter, cand))

    for t in range(params.max_new_tokens):
        freq = np.zeros(vocab, dtype=np.float64)
        new_beams: list[_Hyp] = []
        parents: list[int] = []
        new_tokens: list[int] = []
        for g in range(ng):
            rows = list(range(g * gs, (g + 1) * gs))
            if done[g]:  # keep the group's rows as dead placeholders so indices stay aligned
                for r in rows:
                    new_beams.append(_Hyp(beams[r].tokens + [0], _NEG, 0.0))
                    parents.append(r)
                    new_tokens.append(0)
                continue
            processed = lp[rows] - params.diversity_penalty * freq[None, :]
            total = processed + np.array([beams[r].penalised for r in rows])[:, None]
            flat = total.ravel()
            k = min(2 * gs, flat.size)
            top = np.argpartition(-flat, k - 1)[:k]
            top = top[np.argsort(-flat[top], kind="stable")]
            kept: list[tuple[int, int, float]] = []
            for rank, idx in enumerate(top):
                r, tok = rows[idx // vocab], int(idx % vocab)
                if beams[r].penalised <= _NEG / 2:
                    continue
                hyp = _Hyp(beams[r].tokens + [tok], float(flat[idx]), beams[r].logprob + float(lp[r, tok]))
                text = decode(hyp.tokens)
                cut = find_stop(text, params.stop)
                if tok in eos or cut >= 0:
                    if rank < gs:  # transformers: only hypotheses among the top G may finish
                        add(g, hyp, text[:cut] if cut >= 0 else decode(hyp.tokens[:-1]), "stop")
                    continue
                if len(kept) < gs:
                    kept.append((r, tok, 0.0))
                    new_beams.append(hyp)
                    parents.append(r)
                    new_tokens.append(tok)
            for _ in range(gs - len(kept)):  # not enough live continuations: dead placeholders
                r = rows[0]
                new_beams.append(_Hyp(beams[r].tokens + [0], _NEG, 0.0))
                parents.append(r)
                new_tokens.append(0)
            for r, tok, _ in kept:
                freq[tok] += 1
            done[g] = len(finished[g]) >= gs
        beams = new_beams
        if all(done) or t == params.max_new_tokens - 1:
            break
        lp = step([b.tokens for b in beams], parents, new_tokens)
    for g in range(ng):
        if len(finished[g]) < gs:
            for r in range(g * gs, (g + 1) * gs):
                if beams[r].penalised > _NEG / 2:
                    add(g, beams[r], decode(beams[r].tokens), "length")
    out = [c for heap in finished for _, _, c in heap]
    return sorted(out, key=lambda c: (c.group, -c.score))


# ------------------------------------------------------------------------------------ engines
def diverse_beam_search(lm: Any, prompt: str, params: BeamSearchParams) -> list[BeamCandidate]:
    """Diverse beam search on an :class:`~groundplan.llm.hf.HFLanguageModel` (prefix cache + tree
    attention; see the module doc)."""
    import torch

    ctx = lm._encode(prompt)
    if len(ctx) == 0:
        raise InvalidInputError("the prompt is empty and the model has no BOS token to condition on")
    tok = lm.tokenizer

    def decode(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=True)

    with lm._lock, torch.inference_mode():
        kv, last = lm._context(ctx)
        past = len(ctx)
        cache = lm._new_cache(kv, past)
        ancestors: list[list[int]] = [[] for _ in range(params.num_beams)]  # cache columns of each beam's tokens
        columns = 0

        def step(paths: list[list[int]], parents: list[int], new_tokens: list[int]) -> np.ndarray:
            nonlocal ancestors, columns
            nb = len(new_tokens)
            anc = [ancestors[p] + [columns + j] for j, p in enumerate(parents)]
            allowed = np.zeros((nb, past + columns + nb), dtype=bool)
            allowed[:, :past] = True
            for j, cols in enumerate(anc):
                allowed[j, [past + c for c in cols]] = True
            depth = len(anc[0]) - 1
            out = lm.model(input_ids=torch.as_tensor([new_tokens], device=lm.device),
                           position_ids=torch.full((1, nb), past + depth, device=lm.device),
                           attention_mask=lm._mask_tensor(allowed), past_key_values=cache, use_cache=True)
            lm.stats.forward_tokens += nb
            ancestors, columns = anc, columns + nb
            return torch.log_softmax(out.logits[0].float(), dim=-1).cpu().numpy()

        first = torch.log_softmax(last.float(), dim=-1).cpu().numpy()
        return _search(first, step, params, set(lm._eos), decode)


def reference_beam_search(lm: Any, prompt: str, params: BeamSearchParams) -> list[BeamCandidate]:
    """The same search with one full forward pass per beam and step, no cache (the test oracle)."""
    import torch

    ctx = [int(x) for x in lm._encode(prompt)]
    tok = lm.tokenizer

    def logprobs(ids: list[int]) -> np.ndarray:
        out = lm.model(input_ids=torch.as_tensor([ids], device=lm.device))
        return torch.log_softmax(out.logits[0, -1].float(), dim=-1).cpu().numpy()

    def step(paths: list[list[int]], parents: list[int], new_tokens: list[int]) -> np.ndarray:
        return np.stack([logprobs(ctx + p) for p in paths])

    with torch.inference_mode():
        return _search(logprobs(ctx), step, params, set(lm._eos), lambda ids: tok.decode(ids, skip_special_tokens=True))
