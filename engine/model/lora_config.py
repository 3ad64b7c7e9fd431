"""`adapter_config.json` of a PEFT LoRA adapter: which modules it changes, with which scale.

A LoRA adapter turns a linear layer `y = x W^T` into `y = x W^T + scaling * (x A^T) B^T`
(A: [r, in], B: [out, r]) on the modules its config selects. `LoraConfig` reads the config
as Hugging Face PEFT writes it and answers the loader's questions about a module name `m`
(`model.layers.3.self_attn.q_proj`, without PEFT's `base_model.model.` prefix):

* `selects(m)`: `target_modules` is a list (m equals an entry, or ends with "." + entry,
  and then, with `layers_to_transform`, only in those layers), a regular expression that
  must match all of m, or "all-linear" (every projection of the decoder, not the LM head);
* `rank(m)` / `alpha(m)`: `r` / `lora_alpha`, unless a key of `rank_pattern` /
  `alpha_pattern` matches m's tail: the first key k, in the file's order, for which
  `re.match(rf"(.*\\.)?({k})$", m)` succeeds;
* `scaling(m)`: alpha / r, or alpha / sqrt(r) with `use_rslora` (rank-stabilised LoRA).

Everything else that changes the maths -- DoRA, extra fully trained modules, LoRA biases,
Conv1D's transposed layout, replicated layers, activated LoRA... -- is refused with
`UnsupportedModel` naming the key and the file, and so is any key this reader does not
know whose value is not empty (a newer PEFT's feature). Keys that only say how the adapter
was trained (dropout, initialisation) are ignored. Messages name keys but never quote
values: an operator may let clients load adapters from a folder, and what its files hold
stays out of the answer.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelFormatError, UnsupportedModel

CONFIG_FILE = "adapter_config.json"
ALL_LINEAR = "all-linear"
TASK_TYPES = (None, "CAUSAL_LM")
# The layer index of a module name when `layers_pattern` is not set: the first number after
# a "<name>." segment (`model.layers.N.` -> N).
LAYER_INDEX = re.compile(r".*?\.[^.]*\.(\d+)\.")

# Keys that must be off (null, false, empty): what each would ask for, in words.
MUST_BE_OFF = {
    "use_dora": "DoRA (weight-decomposed LoRA, a learned magnitude per column)",
    "modules_to_save": "fully trained copies of whole modules",
    "lora_bias": "a trained bias on lora_B",
    "fan_in_fan_out": "Conv1D weights stored [in, out] (GPT-2-style layers)",
    "layer_replication": "layers replicated from the base's",
    "trainable_token_indices": "trained rows of the token embedding",
    "target_parameters": "adapters on raw parameters instead of linear modules",
    "exclude_modules": "modules excluded from target_modules",
    "alora_invocation_tokens": "activated LoRA (on only after an invocation sequence)",
    "use_qalora": "QALoRA (pooled inputs for a quantised base)",
    "use_bdlora": "block-diagonal LoRA",
    "arrow_config": "Arrow routing between several LoRA experts",
}
# Keys read below, or that only describe training, the base's label, or PEFT itself.
KNOWN = {"peft_type", "r", "lora_alpha", "use_rslora", "target_modules", "rank_pattern",
         "alpha_pattern", "layers_to_transform", "layers_pattern", "bias", "task_type",
         "base_model_name_or_path", "revision", "inference_mode", "init_lora_weights",
         "lora_dropout", "peft_version", "auto_mapping", "megatron_config", "megatron_core",
         "loftq_config", "eva_config", "corda_config", "lora_ga_config", "qalora_group_size",
         "ensure_weight_tying", "runtime_config"}


def _is_off(value) -> bool:
    return value is None or value is False or value == [] or value == {} or value == ""


@dataclass(frozen=True)
class LoraConfig:
    """A LoRA adapter's config, checked; the module rules of the module docstring."""
    path: str                                   # the adapter_config.json it came from
    r: int
    lora_alpha: float
    use_rslora: bool
    target_modules: tuple[str, ...] | None      # a list's entries (None: a regex or all-linear)
    target_regex: re.Pattern | None             # a string's pattern (None: a list or all-linear)
    all_linear: bool
    rank_pattern: tuple[tuple[str, int], ...]   # (key, r) in the file's order
    alpha_pattern: tuple[tuple[str, float], ...]
    layers_to_transform: tuple[int, ...] | None  # None: every layer
    layers_pattern: tuple[str, ...]              # () : the first numbered segment

    def selects(self, module: str) -> bool:
        """Does the adapter change `module` (PEFT's target rule, module docstring)?"""
        if self.all_linear:
            return True                 # the caller offers only the decoder's projections
        if self.target_regex is not None:
            return self.target_regex.fullmatch(module) is not None
        if module in self.target_modules:
            return True                 # named in full: no layer filter (PEFT does the same)
        if not any(module.endswith("." + entry) for entry in self.target_modules):
            return False
        if self.layers_to_transform is None:
            return True
        return _layer_index(module, self.layers_pattern) in self.layers_to_transform

    def rank(self, module: str) -> int:
        return _pattern_value(self.rank_pattern, module, self.r)

    def alpha(self, module: str) -> float:
        return _pattern_value(self.alpha_pattern, module, self.lora_alpha)

    def scaling(self, module: str) -> float:
        r, alpha = self.rank(module), self.alpha(module)
        return alpha / math.sqrt(r) if self.use_rslora else alpha / r


def _layer_index(module: str, layers_pattern: tuple[str, ...]) -> int | None:
    if not layers_pattern:
        found = LAYER_INDEX.match(module)
    else:
        found = next((m for p in layers_pattern
                      if (m := re.match(rf".*?\.{p}\.(\d+)\.", module))), None)
    return None if found is None else int(found.group(1))


def _pattern_value(pattern: tuple[tuple[str, object], ...], module: str, default):
    for key, value in pattern:
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


# --- reading ---------------------------------------------------------------------------

def read_lora_config(folder: str | Path) -> LoraConfig:
    """`folder/adapter_config.json` -> `LoraConfig`, or ModelFormatError / UnsupportedModel
    naming the file and the key."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise ModelFormatError(path, "no adapter_config.json: not a PEFT adapter folder")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ModelFormatError(path, "not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ModelFormatError(path, f"not valid JSON: {e.msg} at line {e.lineno} column "
                                     f"{e.colno}") from None
    if not isinstance(raw, dict):
        raise ModelFormatError(path, "not a JSON object")
    return _parse(raw, str(path))


def _parse(raw: dict, path: str) -> LoraConfig:
    if raw.get("peft_type") != "LORA":
        raise UnsupportedModel(path, "peft_type is not LORA: only LoRA adapters are "
                                     "supported")
    _refuse_features(raw, path)
    r = _positive_int(raw.get("r"), "r", path)
    alpha = _number(raw.get("lora_alpha"), "lora_alpha", path)
    targets, regex, all_linear = _targets(raw, path)
    layers = raw.get("layers_to_transform")
    if layers == []:
        layers = None                   # PEFT: an empty list means every layer
    if layers is not None and targets is None:
        raise ModelFormatError(path, "layers_to_transform needs a list target_modules "
                                     "(PEFT refuses it with a regex string)")
    return LoraConfig(
        path=path, r=r, lora_alpha=alpha, use_rslora=_bool(raw, "use_rslora", path),
        target_modules=targets, target_regex=regex, all_linear=all_linear,
        rank_pattern=_patterns(raw, "rank_pattern", path, integer=True),
        alpha_pattern=_patterns(raw, "alpha_pattern", path, integer=False),
        layers_to_transform=None if layers is None else _ints(layers, path),
        layers_pattern=_strings(raw.get("layers_pattern"), "layers_pattern", path))


def _refuse_features(raw: dict, path: str) -> None:
    for key, meaning in MUST_BE_OFF.items():
        if not _is_off(raw.get(key)):
            raise UnsupportedModel(path, f"{key} is set: {meaning} is not supported")
    if raw.get("bias", "none") != "none":
        raise UnsupportedModel(path, "bias is not \"none\": trained biases of the base's "
                                     "modules are not supported")
    if raw.get("task_type") not in TASK_TYPES:
        raise UnsupportedModel(path, "task_type is not CAUSAL_LM: only causal language "
                                     "model adapters are supported")
    unknown = sorted(k for k, v in raw.items()
                     if k not in KNOWN and k not in MUST_BE_OFF and not _is_off(v))
    if unknown:
        raise UnsupportedModel(path, f"{unknown[0]} is set: a PEFT option this reader "
                                     f"does not know is not supported")


def _targets(raw: dict, path: str):
    """(list entries or None, compiled regex or None, all-linear?)."""
    value = raw.get("target_modules")
    if value == ALL_LINEAR:
        return None, None, True
    if isinstance(value, str):
        if raw.get("layers_pattern") not in (None, [], ""):
            raise ModelFormatError(path, "layers_pattern needs a list target_modules")
        try:
            return None, re.compile(value), False
        except re.error as e:
            raise ModelFormatError(path, f"target_modules is not a valid regular expression:"
                                         f" {e.msg} at position {e.pos}") from None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value), None, False
    raise ModelFormatError(path, "target_modules: expected a list of module names, a "
                                 "regular expression or \"all-linear\"")


def _patterns(raw: dict, key: str, path: str, *, integer: bool) -> tuple:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise ModelFormatError(path, f"{key} is not a JSON object")
    pairs = []
    for pattern, number in value.items():
        try:
            re.compile(pattern)
        except re.error as e:
            raise ModelFormatError(path, f"{key} key {pattern!r} is not a valid regular "
                                         f"expression: {e.msg} at position {e.pos}") from None
        where = f"{key}[{pattern!r}]"
        pairs.append((pattern, _positive_int(number, where, path) if integer
                      else _number(number, where, path)))
    return tuple(pairs)


def _positive_int(value, key: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelFormatError(path, f"{key}: expected a positive integer")
    return value


def _number(value, key: str, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelFormatError(path, f"{key}: expected a number")
    return float(value)


def _bool(raw: dict, key: str, path: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ModelFormatError(path, f"{key}: expected true or false")
    return value


def _ints(value, path: str) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in items):
        raise ModelFormatError(path, "layers_to_transform: expected a layer index or a "
                                     "list of them")
    return tuple(items)


def _strings(value, key: str, path: str) -> tuple[str, ...]:
    if value in (None, "", []):
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise ModelFormatError(path, f"{key}: expected a name or a list of names")
    return tuple(items)
