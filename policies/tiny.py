"""A tiny, randomly initialised chat model built locally: a byte-level BPE tokenizer and a Qwen2 network.

It gives the token-exact path (`HFPolicy`, the learner, the CLI) a real model to run on a CPU in
seconds, with nothing downloaded. The tokenizer is trained on the built-in task suite and on ChatML
conversations with tool calls, so prompts of this harness encode into a sensible number of tokens.
"""

from __future__ import annotations

import random
import re
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from policies.chat_format import CHATML_TEMPLATE

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""Control tokens; `<|im_end|>` ends a message and is the eos token, `<|endoftext|>` pads."""
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
"""Added as ordinary (not special) tokens, as Qwen2.5 does: decoding without special tokens keeps them."""

QWEN2_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

_CORPUS_SUFFIXES = {".py", ".md", ".yaml", ".toml"}
_TOOL_NAMES = ["read_file", "list_dir", "write_file", "edit", "search", "bash", "run_tests", "submit"]
_PROSE = (
    "the test fails because the function returns a wrong value when the input is empty so I will read "
    "the file first then fix the bug and run the tests again all tests pass now submit the change"
)


def build_tiny_model(
    path: Path, seed: int = 0, vocab_size: int = 2048, hidden_size: int = 64, layers: int = 2, heads: int = 4
) -> Path:
    """Trains the tokenizer, initialises the model from `seed`, and saves both to `path`.

    The same arguments give byte-identical files. Load them with `AutoTokenizer.from_pretrained(path)` and
    `AutoModelForCausalLM.from_pretrained(path)`, or with `HFPolicy(path)`.
    """
    if hidden_size % heads:
        raise ValueError(f"hidden_size {hidden_size} is not a multiple of heads {heads}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(vocab_size)
    vocab = tokenizer.get_vocab()
    eos_id, pad_id = vocab["<|im_end|>"], vocab["<|endoftext|>"]
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2 if heads % 2 == 0 else heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = [eos_id, pad_id]
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _train_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    # Qwen2's pipeline exactly: `AutoTokenizer` loads a qwen2 model's tokenizer as `Qwen2Tokenizer`, which
    # keeps the saved vocabulary and merges but rebuilds the normalizer and pre-tokenizer as these.
    bpe = Tokenizer(models.BPE(continuing_subword_prefix="", end_of_word_suffix=""))
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS),
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Training does not split on added tokens, so their text is cut out here, or BPE would learn pieces
    # of them ("<|im_", "|>") that encoding never uses.
    cut = re.compile("|".join(re.escape(token) for token in SPECIAL_TOKENS + TOOL_TOKENS))
    bpe.train_from_iterator([piece for text in _corpus() for piece in cut.split(text)], trainer=trainer)
    bpe.add_tokens([AddedToken(token, special=False, normalized=False) for token in TOOL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=4096,
    )


CORPUS_SUITES = ("builtin", "demo")
"""The suites whose files train the tokenizer: Python's, fixed, so that a suite added later (another
language's) changes neither the tokenizer nor what the tests' tiny model learns."""


def _corpus() -> list[str]:
    """The Python suites' files, in a fixed order, and generated tool-use conversations."""
    suites = files("tasks").joinpath("suites")
    found = [item for name in CORPUS_SUITES for item in _walk(suites.joinpath(name))]
    texts = [item.read_text(encoding="utf-8") for item in sorted(found, key=lambda t: str(t))]
    rng = random.Random(0)
    texts += [_conversation(rng) for _ in range(300)]
    return texts


def _walk(folder: Traversable) -> list[Traversable]:
    found: list[Traversable] = []
    for item in folder.iterdir():
        if item.is_dir():
            found += _walk(item)
        elif Path(item.name).suffix in _CORPUS_SUFFIXES:
            found.append(item)
    return found


def _conversation(rng: random.Random) -> str:
    words = _PROSE.split()

    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(4, 14))).capitalize() + "."

    path = rng.choice(["x.py", "src/app.py", "tests/test_app.py", "README.md", "pkg/core.py"])
    tool = rng.choice(_TOOL_NAMES)
    return (
        f"<|im_start|>system\nYou are a careful coding agent.<|im_end|>\n"
        f"<|im_start|>user\n{sentence()}<|im_end|>\n"
        f"<|im_start|>assistant\n{sentence()}\n"
        f'<tool_call>\n{{"name": "{tool}", "arguments": {{"path": "{path}"}}}}\n</tool_call><|im_end|>\n'
        f"<|im_start|>user\n<tool_response>\n{sentence()}\n</tool_response><|im_end|>\n"
        f"<|im_start|>assistant\n{sentence()}<|im_end|>\n<|endoftext|>"
    )
