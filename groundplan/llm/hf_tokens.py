"""Tokenisation at the boundary between a prompt and an option, for the Hugging Face engine.

An option's tokens are those it gets inside ``prompt + option``, i.e. every token of the joint encoding
whose character span ends past the prompt (a leading space or a merge across the boundary included),
conditioned on the joint encoding's own prompt tokens: 'pine' + 'apple' is scored as the tokens the joint
text has, not as the tokens of 'apple' alone. For byte-level BPE tokenizers the joint encodings are built
by encoding the prompt once and only its last line with each option (checked against one true joint
encoding per call; see :meth:`BoundaryTokenizer.joint_encodings`).

Also here: a text's (or token ids') tokens with each token's character offset, what per-token prompt
log-probs (:mod:`groundplan.llm.hf_echo`) report, and the decoded text of a token.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from groundplan.core.errors import InvalidInputError
from groundplan.llm.hf_stats import EngineStats


@dataclass
class OptionPlan:
    """One option of a score request, after tokenisation."""

    segment: np.ndarray  # tokens after the shared context (context tail + option tokens)
    scored_from: int  # index in ``segment`` of the first option token


def split_at_boundary(options: Sequence[str], encodings: Sequence[tuple[np.ndarray, np.ndarray]],
                      prompt_len: int, prefix_id: int | None = None) -> tuple[np.ndarray, list[OptionPlan], list[np.ndarray]]:
    """The context every option shares and each option's plan after it, from each joint ``prompt + option``
    encoding (token ids, each token's end in the text) and the prompt's length in the same unit (characters
    for a transformers tokenizer, bytes for llama.cpp's): an option's first token is the first whose span
    ends past the prompt; the shared context is the longest common prefix of the encodings before that.

    A model without BOS has nothing to condition an option's first token on when that token is the text's
    first (a prompt of one token that an option merges into: 'env' + 'e'; a prompt the tokenizer encodes to
    nothing): then, given ``prefix_id``, every encoding of the request starts with that token, as
    lm-evaluation-harness conditions an empty context on its ``prefix_token_id`` (BOS, else end-of-text).
    Requests that have a context are unchanged."""
    if not options:
        raise InvalidInputError("score() needs at least one option")
    fulls, firsts = [], []
    for opt, (ids, ends) in zip(options, encodings):
        ids = np.asarray(ids, dtype=np.int64)
        past = np.flatnonzero(np.asarray(ends) > prompt_len)
        first = int(past[0]) if len(past) else None
        if not opt or first is None:
            raise InvalidInputError(f"option {opt!r} adds no tokens to the prompt")
        fulls.append(ids)
        firsts.append(first)
    shared = _common_prefix(fulls, min(firsts))  # 0 too when an option's first token is the text's
    if shared == 0 and prefix_id is not None:
        fulls = [np.concatenate([np.asarray([prefix_id], dtype=np.int64), f]) for f in fulls]
        firsts = [k + 1 for k in firsts]
        shared = _common_prefix(fulls, min(firsts))
    if min(firsts) == 0:
        raise InvalidInputError("the prompt is empty and the model has no BOS token to condition on")
    if shared == 0:
        raise InvalidInputError("the options share no prompt tokens to condition on")
    base = fulls[0][:shared]
    plans = [OptionPlan(f[shared:], k - shared) for f, k in zip(fulls, firsts)]
    return base, plans, fulls


def _common_prefix(fulls: Sequence[np.ndarray], limit: int) -> int:
    """How many leading tokens, at most ``limit``, all encodings share."""
    shared = limit
    for f in fulls[1:]:
        neq = np.flatnonzero(f[:shared] != fulls[0][:shared])
        if len(neq):
            shared = int(neq[0])
    return shared


def splice_cut(prompt: str, options: Sequence[str]) -> int:
    """Where the last-line splice cuts ``prompt`` (the start of its last line), or 0 when it may not: a one-line
    prompt, a last line that starts with whitespace (a pre-tokeniser piece may run into it from the newline),
    or a single option (nothing to save)."""
    cut = prompt.rfind("\n", 0, len(prompt) - 1) + 1
    return cut if cut > 0 and not prompt[cut].isspace() and len(options) > 1 else 0


class BoundaryTokenizer:
    """A transformers tokenizer as the engine uses it: joint ``prompt + option`` encodings split at the
    option boundary, and texts with per-token offsets.

    Args:
        tokenizer: the model's (fast) tokenizer; offsets need a fast one.
        stats: the engine's counters (``splice_fallbacks`` is counted here).
    """

    def __init__(self, tokenizer: Any, stats: EngineStats) -> None:
        self.tokenizer = tokenizer
        self.stats = stats
        self.special = set(tokenizer.all_special_ids)
        spec = _tokenizer_spec(tokenizer)
        #: whether the last-line splice may be used (byte-level BPE); settable to force joint encodings
        self.line_splice = _pretokenizes_by_regex(spec)
        self.eos = {i for i in [tokenizer.eos_token_id] if i is not None}
        #: what an option is conditioned on when the prompt leaves no token before it (see split_at_boundary)
        self.prefix_id: int | None = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        self._token_texts: dict[int, str] = {}
        self._byte_level = _decodes_byte_level(spec)
        self._token_bytes: list[bytes] | None = None  # each token's bytes (byte-level; built on first use)
        self._byte_widths: np.ndarray | None = None  # and their lengths

    def encode(self, text: str) -> np.ndarray:
        """``text``'s token ids, special tokens the tokenizer adds (BOS) included."""
        return np.asarray(self.tokenizer(text, add_special_tokens=True).input_ids, dtype=np.int64)

    def strip_appended(self, ids: list[int], offs: list[tuple[int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
        """Drop trailing special tokens some tokenizers append (EOS): they are not the text's."""
        while len(ids) > 1 and ids[-1] in self.special and tuple(offs[-1]) == (0, 0):
            ids, offs = ids[:-1], offs[:-1]
        return ids, offs

    def encoded(self, ids: Sequence[int], offs: Sequence[Sequence[int]], text: str, shift: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, each token's character end in ``text`` + ``shift``) as arrays, appended special tokens
        dropped.

        A byte-level tokenizer's ends are counted from its tokens' own bytes, not from the offsets it
        reports: around characters outside the Basic Multilingual Plane those offsets can be wrong (in
        'e\U00099e0b-' the tokenizer gives '-' the span of the character before it, so '-' seemed to add no
        token to the prompt 'e\U00099e0b'). A token that ends inside a character ends with it, as the
        offsets would have it. Where the tokens' bytes are not, in order, the text's (a normaliser that
        rewrites it), the reported offsets stand."""
        ids, offs = self.strip_appended(list(ids), [tuple(o) for o in offs])
        spans = self._byte_level_spans(ids, offs, text)
        ends = spans[1] if spans is not None else np.asarray([e for _, e in offs], dtype=np.int64).reshape(-1)
        return np.asarray(ids, dtype=np.int64), ends + shift

    def _byte_level_spans(self, ids: Sequence[int], offs: Sequence[tuple[int, int]],
                          text: str) -> tuple[np.ndarray, np.ndarray] | None:
        """Each token's character start and end in ``text``, from the tokens' own bytes (None: not
        byte-level, or the tokens' bytes are not, in order, in ``text``'s).

        A token's bytes are found in the text's in order. Usually they tile it; but a byte the vocabulary
        lacks is dropped without a trace (SmolLM2's has no 0xF2, the lead byte of some characters outside the
        Basic Multilingual Plane), and then the tokens after it are located past the gap. A token that starts
        or ends inside a character starts or ends with it (the character's span, as offsets would give it)."""
        if not self._byte_level or not len(ids):
            return None
        if self._token_bytes is None:
            self._token_bytes = _token_bytes(self.tokenizer)
            self._byte_widths = np.asarray([len(b) for b in self._token_bytes], dtype=np.int64)
        sizes = self._byte_widths[np.asarray(ids, dtype=np.int64)]
        k = 0  # special tokens the post-processor puts before the text (BOS) span none of it
        while k < len(ids) and ids[k] in self.special and tuple(offs[k]) == (0, 0):
            k += 1
        sizes[:k] = 0
        byte_ends = np.cumsum(sizes)
        raw = text.encode("utf-8", "surrogatepass")
        if byte_ends[-1] != len(raw):  # a byte the vocabulary lacks was dropped: find the tokens past it
            byte_ends = self._locate(ids, sizes, raw)
            if byte_ends is None:
                return None
        byte_starts = byte_ends - sizes
        if len(raw) == len(text):  # ASCII: a byte is a character
            return byte_starts, byte_ends
        char_ends = np.cumsum([len(c.encode("utf-8", "surrogatepass")) for c in text])
        return (np.searchsorted(char_ends, byte_starts, side="right"),
                np.where(byte_ends == 0, 0, np.searchsorted(char_ends, byte_ends, side="left") + 1))

    def _locate(self, ids: Sequence[int], sizes: np.ndarray, raw: bytes) -> np.ndarray | None:
        """Each token's byte end in ``raw``, its bytes found in order from where the previous token ended
        (None: one is not there)."""
        ends, pos = [], 0
        for i, n in zip(ids, sizes):
            if n:
                at = raw.find(self._token_bytes[int(i)], pos)
                if at < 0:
                    return None
                pos = at + int(n)
            ends.append(pos)
        return np.asarray(ends, dtype=np.int64)

    def joint_encodings(self, prompt: str, options: Sequence[str], splice: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
        """Token ids and each token's character end, of every ``prompt + option`` as the tokenizer
        encodes the joint text.

        Encoding 51 copies of a 3,000-character prompt costs tens of milliseconds of CPU per SayCan step,
        more than the step's whole forward on a GPU. So with ``splice`` the prompt is encoded once, cut at
        the start of its last line (a token boundary), and only ``last line + option`` is encoded per
        option, after the tokens the first option's joint encoding has before that line (the one full
        encoding a call makes). That equals the joint encoding when the tokenizer pre-tokenises by a regular expression
        (byte-level BPE: GPT-2, Llama 3, SmolLM2, Qwen), whose pieces never run from a newline into a
        line that starts with a non-space character, and merges stay inside a piece; so the splice is used
        only for such tokenizers (``line_splice``) and such a last line. The first option's spliced
        encoding is also checked against its joint one on every call; a difference falls back to encoding
        every option jointly (``stats.splice_fallbacks``)."""
        joint = [prompt + o for o in options]
        cut = splice_cut(prompt, options) if splice and self.line_splice else 0
        if cut:
            first = self.tokenizer(joint[0], add_special_tokens=True, return_offsets_mapping=True)
            k = _tokens_before(first["offset_mapping"], cut)
            if k is not None:
                ids0, ends0 = self.encoded(first["input_ids"], first["offset_mapping"], joint[0])
                enc = self.tokenizer([t[cut:] for t in joint], add_special_tokens=False, return_offsets_mapping=True)
                spliced = []
                for t, ids, offs in zip(joint, enc["input_ids"], enc["offset_mapping"]):
                    tail_ids, tail_ends = self.encoded(ids, offs, t[cut:], cut)
                    spliced.append((np.concatenate([ids0[:k], tail_ids]), np.concatenate([ends0[:k], tail_ends])))
                if np.array_equal(ids0, spliced[0][0]) and np.array_equal(ends0, spliced[0][1]):
                    return spliced
                self.stats.splice_fallbacks += 1
        enc = self.tokenizer(joint, add_special_tokens=True, return_offsets_mapping=True)
        return [self.encoded(ids, offs, t) for t, ids, offs in zip(joint, enc["input_ids"], enc["offset_mapping"])]

    def split(self, prompt: str, options: Sequence[str], splice: bool = True) -> tuple[np.ndarray, list[OptionPlan], list[np.ndarray]]:
        """Tokenise ``prompt + option`` jointly and find each option's own tokens (see the module doc).

        Returns the context shared by all options, each option's segment after it, and each option's
        full joint encoding (for the reference path, which encodes every option jointly: ``splice=False``)."""
        encodings = self.joint_encodings(prompt, options, splice=splice) if options else []
        return split_at_boundary(options, encodings, len(prompt), self.prefix_id)

    def token_text(self, token_id: int) -> str:
        """One token decoded on its own (memoised: echo responses decode every token of every text)."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = self.tokenizer.decode([token_id])
        return text

    def prompt_tokens(self, prompt: str | Sequence[int]) -> tuple[str, np.ndarray, list[int]]:
        """(text, token ids, each token's character offset in the text) of a text or of token ids."""
        return self.prompts_tokens([prompt])[0]

    def prompts_tokens(self, prompts: Sequence[str | Sequence[int]]) -> list[tuple[str, np.ndarray, list[int]]]:
        """:meth:`prompt_tokens` of each prompt, the texts encoded in one batch call (a fast tokenizer
        encodes a batch in parallel: an echo request's 51 texts of a thousand tokens each)."""
        texts = [p for p in prompts if isinstance(p, str)]
        if any(not t for t in texts):
            raise InvalidInputError("a prompt is empty")
        batch = self.tokenizer(texts, add_special_tokens=True, return_offsets_mapping=True) if texts else None
        out, at = [], 0
        for prompt in prompts:
            if isinstance(prompt, str):
                ids = list(batch["input_ids"][at])
                offs = [tuple(o) for o in batch["offset_mapping"][at]]
                at += 1
                ids, offs = self.strip_appended(ids, offs)
                spans = self._byte_level_spans(ids, offs, prompt)  # byte-level: starts as in encoded()
                starts = spans[0].tolist() if spans is not None else [int(o[0]) for o in offs]
                out.append((prompt, np.asarray(ids, dtype=np.int64), starts))
            else:
                out.append(self._id_prompt(prompt))
        return out

    def _id_prompt(self, prompt: Sequence[int]) -> tuple[str, np.ndarray, list[int]]:
        """:meth:`prompt_tokens` of token ids: their text, and offsets as the tokenizer gives them for it."""
        ids = [int(i) for i in prompt]
        if not ids:
            raise InvalidInputError("a prompt is an empty list of token ids")
        vocab = len(self.tokenizer)
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise InvalidInputError(f"token id {bad[0]} is not in this model's vocabulary (0..{vocab - 1})")
        text = self.tokenizer.decode(ids)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) == ids:
            offsets = [int(o[0]) for o in enc["offset_mapping"]]
        else:  # ids the tokenizer would not produce for this text: offsets by the tokens' own texts
            offsets = list(np.minimum(np.cumsum([0] + [len(self.token_text(i)) for i in ids[:-1]]), len(text)))
        return text, np.asarray(ids, dtype=np.int64), [int(o) for o in offsets]


def _tokens_before(offsets: Sequence[Sequence[int]], cut: int) -> int | None:
    """How many leading tokens of an encoding end at or before character ``cut`` (special tokens the
    tokenizer prepends included), or None when no token boundary lies at ``cut``."""
    k = 0
    while k < len(offsets) and offsets[k][1] <= cut and not (k and tuple(offsets[k]) == (0, 0)):
        k += 1
    if k == 0 or k == len(offsets) or offsets[k][0] < cut or offsets[k - 1][1] != cut:
        return None
    return k


def _token_bytes(tokenizer: Any) -> list[bytes]:
    """Every token's bytes, for a byte-level tokenizer: an added token's are its content's, any other's its
    symbols mapped back to bytes (GPT-2's byte-to-symbol table; a symbol outside it stands for itself)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    to_byte = {u: b for b, u in bytes_to_unicode().items()}
    added = {int(i): t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    symbols = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    out = []
    for i, sym in enumerate(symbols):
        if i in added:
            out.append(added[i].encode("utf-8", "surrogatepass"))
        else:
            out.append(b"".join(bytes([to_byte[c]]) if c in to_byte else c.encode("utf-8", "surrogatepass")
                                for c in (sym or "")))
    return out


def _tokenizer_spec(tokenizer: Any) -> dict:
    """A fast tokenizer's definition (its tokenizer.json) as a dict, {} for a slow one; parsed once per
    tokenizer (a quarter of a second for SmolLM2's)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return json.loads(backend.to_str()) if backend is not None else {}


def _components(spec: dict, section: str, listed: str) -> list[dict]:
    """The parts of a tokenizer definition's ``section`` (``decoder``, ``pre_tokenizer``): a ``Sequence``'s
    ``listed`` parts, else the section itself."""
    part = spec.get(section) or {}
    return part.get(listed, [part]) if part.get("type") == "Sequence" else [part]


def _decodes_byte_level(spec: dict) -> bool:
    """Whether a tokenizer (its definition, :func:`_tokenizer_spec`) has byte-level symbols as tokens (GPT-2's
    ``ByteLevel`` decoder: one symbol per byte), so a token's bytes are its symbols mapped back."""
    return any(p.get("type") == "ByteLevel" for p in _components(spec, "decoder", "decoders"))


def _pretokenizes_by_regex(spec: dict) -> bool:
    """Whether a tokenizer (its definition, :func:`_tokenizer_spec`) splits text into pieces by a regular
    expression before merging (byte-level BPE's ``ByteLevel(use_regex=True)``, or a ``Split`` by pattern as
    Llama 3's), the condition for encoding a prompt's last line apart from the lines before it."""
    parts = _components(spec, "pre_tokenizer", "pretokenizers")
    return any((p.get("type") == "ByteLevel" and p.get("use_regex", True)) or
               (p.get("type") == "Split" and "Regex" in (p.get("pattern") or {})) for p in parts)
