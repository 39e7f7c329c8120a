"""The tiny policy: a word tokenizer over the env's vocabulary and a from-scratch TinyGPT.

Prompt layout (ids), for ``history_window=2`` and ``prompt_source="anchor"``::

    S F F \\n F H G <sep> up <sep> left <sep>
    └ current anchor ┘    └ past actions ┘

The current state comes first, so its tokens sit at the same positions whatever the history: rows in the same
state share that opening, which the update runs once (``trainer.shared_prefix``, a prefix tree over the rows).
Each history entry is the past action's words, preceded by the past observation's words when
``prompt_source="observation"`` (past anchors are not part of the history, so with ``"anchor"`` only the
actions are kept), oldest first. With ``mark_unchanged``, an entry whose action left the observation as it
was (the next observation, or the current one for the last entry, equals the entry's) ends with the word
``unchanged`` (``S F F ... <sep> up unchanged <sep> left <sep>``): a move into a wall or an illegal pickup is
then visible, which the actions alone do not show. The response is one token, then a stop token:
``default_max_new_tokens = 1`` (the env's wrapper accepts a bare admissible word such as ``left``). A command
of several words (``go east``) is one token of its own (``build_tiny_policy(actions=...)``).

With ``mask_inadmissible`` the response token is drawn from the state's admissible commands alone
(``info["admissible_actions"]``, ``allowed_tokens``): invalid-action masking (Huang & Ontañón 2022, "A Closer
Look at Invalid Action Masking in Policy Gradient Algorithms", arXiv 2006.14171). The rollout keeps each row's
mask, and the update, the reference and the entropy take every log-prob under the same restricted
distribution, so the PPO ratio compares the distributions the tokens were drawn from.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gigpo_lab.packing.tree_attention import TreeLayout
from gigpo_lab.policy.base import Policy
from gigpo_lab.policy.settings import PROMPT_SOURCES
from gigpo_lab.policy.tiny_gpt import KVCache, TinyGPT
from gigpo_lab.policy.word_tokenizer import WordTokenizer

#: Positions kept free after a prompt for the response (the default SamplingParams budget).
RESPONSE_RESERVE = 8
#: The word that ends a history entry whose action left the observation unchanged (``mark_unchanged``).
UNCHANGED = "unchanged"
#: Distinct texts whose token ids ``build_prompt`` keeps (the memo is emptied when full).
ENCODE_CACHE_SIZE = 65_536


class TinyPolicy(Policy):
    """Word tokenizer + TinyGPT.

    Args:
        tokenizer: the ``WordTokenizer``.
        model: the ``TinyGPT`` (its vocabulary size must cover the tokenizer's).
        prompt_source: ``"anchor"`` (info["anchor"], the compact state) or ``"observation"`` (the text).
        history_window: how many past (observation, action) pairs enter the prompt; 0 = none.
        mark_unchanged: end a history entry with ``UNCHANGED`` when its action left the observation as it was
            (module doc); the tokenizer must know the word.
        mask_inadmissible: sample the response token among the admissible commands only (module doc).
    """

    default_max_new_tokens = 1
    #: The scoring and the update pack shared prompt runs by default (``trainer.shared_prefix=null``): rows in
    #: one state share its whole opening, and the packed forward is one dense attention, cheap at this size.
    packed_update = True
    #: A packed chunk's token bound by default: the dense (T, T) attention grows with the square of T.
    packed_tokens = 1024
    #: The engine's prefill by default (``rollout.engine.prefill=null``): the packed tree, one forward.
    default_prefill = "tree"

    def __init__(
        self,
        tokenizer: WordTokenizer,
        model: TinyGPT,
        prompt_source: str = "anchor",
        history_window: int = 0,
        mark_unchanged: bool = False,
        mask_inadmissible: bool = False,
    ):
        super().__init__()
        if prompt_source not in PROMPT_SOURCES:
            raise ValueError(f"prompt_source={prompt_source!r} is not one of {PROMPT_SOURCES}")
        if history_window < 0:
            raise ValueError(f"history_window={history_window} must be >= 0")
        self.tokenizer = tokenizer
        self.model = model
        self.prompt_source = prompt_source
        self.history_window = history_window
        self.mark_unchanged = bool(mark_unchanged)
        if self.mark_unchanged and UNCHANGED not in tokenizer.token_to_id:
            raise ValueError(
                f"mark_unchanged needs the word {UNCHANGED!r} in the tokenizer's vocabulary; "
                "build_tiny_policy(..., mark_unchanged=True) adds it"
            )
        self._unchanged = [tokenizer.token_to_id[UNCHANGED]] if self.mark_unchanged else []
        self.mask_inadmissible = bool(mask_inadmissible)
        self._encoded: dict[str, list[int]] = {}  # text -> ids (``_encode``)

    def build_prompt(self, observation: str, anchor: str, history: list[tuple[str, str]]) -> list[int]:
        """Ids of the current state and then the window's past entries, each ended by ``<sep>`` (see module doc).
        At most ``max_seq_len - RESPONSE_RESERVE`` tokens: the oldest entries go first, then the state is
        left-truncated."""
        encode, sep = self._encode, self.tokenizer.sep_id
        limit = max(1, self.model.max_seq_len - RESPONSE_RESERVE)
        ids = encode(anchor if self.prompt_source == "anchor" else observation) + [sep]
        if len(ids) > limit:
            return ids[-limit:]
        entries: list[list[int]] = []
        room = limit - len(ids)
        nxt = observation  # the observation that followed the entry being read (newest first)
        for past_observation, action in reversed(
            history[-self.history_window :] if self.history_window else []
        ):
            entry = (encode(past_observation) if self.prompt_source == "observation" else []) + encode(action)
            if self.mark_unchanged and past_observation == nxt:
                entry = entry + self._unchanged
            nxt = past_observation
            if len(entry) + 1 > room:
                break
            entries.append(entry + [sep])
            room -= len(entry) + 1
        for entry in reversed(entries):
            ids += entry
        return ids

    def _encode(self, text: str) -> list[int]:
        """``tokenizer.encode(text)``, memoised: an episode's states and actions repeat across turns and envs.
        The caller must not modify the returned list."""
        ids = self._encoded.get(text)
        if ids is None:
            if len(self._encoded) >= ENCODE_CACHE_SIZE:
                self._encoded.clear()
            ids = self._encoded[text] = self.tokenizer.encode(text)
        return ids

    def stop_ids(self) -> list[int]:
        return [self.tokenizer.eos_id, self.tokenizer.action_close_id]

    def allowed_tokens(self, admissible: Sequence[str]) -> torch.Tensor | None:
        """With ``mask_inadmissible``: (V,) bool, True on the token of each admissible command that is one token
        of the vocabulary (the commands the policy can say). None without the option, or when no admissible
        command is in the vocabulary (the whole vocabulary then, as without masking)."""
        if not self.mask_inadmissible:
            return None
        ids = {self._command_id(command) for command in admissible} - {None}
        if not ids:
            return None
        allowed = torch.zeros(self.model.tok_emb.num_embeddings, dtype=torch.bool)
        allowed[list(ids)] = True
        return allowed

    def _command_id(self, command: str) -> int | None:
        """The one token that says ``command`` (its phrase token, or its single word; the env's action names are
        the tokenizer's phrases, so the text is taken as it is), else None."""
        ids = self._encode(command)
        return ids[0] if len(ids) == 1 and ids[0] != self.tokenizer.unk_id else None

    def forward_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past: KVCache | None = None,
        logits_to_keep: int = 0,
        use_cache: bool = True,
    ) -> tuple[torch.Tensor, KVCache]:
        return self.model(input_ids, attention_mask, past, logits_to_keep)

    def select_cache(self, cache: KVCache, index: torch.Tensor) -> KVCache:
        return [(k.index_select(0, index), v.index_select(0, index)) for k, v in cache]

    @property
    def hidden_size(self) -> int:
        return self.model.tok_emb.embedding_dim

    def prompt_hidden(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """TinyGPT's final hidden state (N, D) at each row's last prompt token."""
        return self.model.last_hidden(prompt_ids, prompt_mask)

    def forward_packed(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        layout: TreeLayout,
        keep: torch.Tensor,
        past: KVCache | None = None,
    ) -> torch.Tensor:
        """Logits (K, V) at columns ``keep`` (K,) of the packed tree ``input_ids`` (T,) at ``positions`` (T,):
        one forward with the tree's pattern as a dense (T, L + T) mask (the tiny model's packed trees are a few
        hundred tokens, so the mask is small and one attention call beats one per node). ``past``: per layer the
        keys and values (1, H, L, D/H) of a prefix every token sees (``prefix_kv``)."""
        prefix = past[0][0].shape[2] if past else 0
        allowed = layout.dense_mask(prefix).to(input_ids.device)
        return self.model.prefill_packed(input_ids, positions, allowed, keep, past)[0]

    def prefill_packed(
        self, input_ids: torch.Tensor, positions: torch.Tensor, layout: TreeLayout, keep: torch.Tensor
    ) -> tuple[torch.Tensor, KVCache]:
        """``forward_packed``'s logits (K, V) and the cache of the packed sequence (per layer (1, H, T, D/H)), for
        the torch engine's ``prefill: tree``."""
        allowed = layout.dense_mask().to(input_ids.device)
        return self.model.prefill_packed(input_ids, positions, allowed, keep)

    def gather_cache(self, cache: KVCache, index: torch.Tensor) -> KVCache:
        """Cut a packed cache (batch 1, T tokens) into U rows, row u holding the packed tokens ``index[u]``
        (U, L) int64: per layer (U, H, L, D/H)."""
        return [(k[0][:, index].transpose(0, 1), v[0][:, index].transpose(0, 1)) for k, v in cache]

    def prefix_kv(self, input_ids: torch.Tensor) -> KVCache:
        """Per layer, the keys and values (1, H, L, D/H) of the prompt prefix ``input_ids`` (L,) at positions
        0..L-1 (differentiable)."""
        ones = torch.ones(1, len(input_ids), dtype=torch.bool, device=input_ids.device)
        return self.model(input_ids[None], ones, None, logits_to_keep=1)[1]
