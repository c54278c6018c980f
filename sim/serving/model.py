"""The stand-in runtime's model: a JSON file of weights, loaded from what the storage
initializer downloaded; purely computational, no side effects.

`{"weights": [w1, ..., wn], "bias": b}` (bias optional): the prediction for an instance
`[x1, ..., xn]` is `b + Σ wi·xi`. Two versions with different weights answer differently, so a
test tells which revision served a request. `model_file` writes one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MODEL_FILE = "model.json"
MOUNT = "/mnt/models"  # where KServe's storage initializer puts the model


class ModelLoadError(Exception):
    """The runtime cannot load the files (its message is the container's termination
    message)."""


class InvalidInput(ValueError):
    """A request the model cannot answer (KServe's InvalidInput: 400)."""


@dataclass(frozen=True)
class LinearModel:
    weights: tuple[float, ...]
    bias: float = 0.0

    def predict(self, instances: object) -> list[float]:
        if not isinstance(instances, list):
            raise InvalidInput('Expected "instances" to be a list')
        predictions = []
        for index, instance in enumerate(instances):
            if not isinstance(instance, list) or len(instance) != len(self.weights):
                raise InvalidInput(
                    f"instance {index}: expected a list of {len(self.weights)} numbers"
                )
            if not all(_number(x) for x in instance):
                raise InvalidInput(f"instance {index}: expected numbers")
            total = self.bias + sum(
                w * float(x) for w, x in zip(self.weights, instance, strict=True)
            )
            predictions.append(round(total, 9))
        return predictions


def _number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def model_file(weights: Sequence[float], bias: float = 0.0) -> bytes:
    """The bytes of a model file the runtime loads."""
    return json.dumps({"weights": list(weights), "bias": bias}).encode()


def choose_file(files: Mapping[str, bytes]) -> bytes:
    """The model file among the downloaded ones (relative paths): `model.json`, else the only
    file there is."""
    if MODEL_FILE in files:
        return files[MODEL_FILE]
    if len(files) == 1:
        return next(iter(files.values()))
    raise ModelLoadError(f"Missing Model File in {MOUNT}: expected {MODEL_FILE}")


def load(files: Mapping[str, bytes]) -> LinearModel:
    """The model in the downloaded files; ModelLoadError when there is none."""
    raw = choose_file(files)
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"Failed to load model from {MOUNT}: not a JSON model") from error
    weights = document.get("weights") if isinstance(document, dict) else None
    bias = document.get("bias", 0.0) if isinstance(document, dict) else None
    if (
        not isinstance(weights, list)
        or not weights
        or not all(_number(w) for w in weights)
        or not _number(bias)
    ):
        raise ModelLoadError(
            f'Failed to load model from {MOUNT}: expected {{"weights": [numbers], "bias": number}}'
        )
    return LinearModel(tuple(float(w) for w in weights), float(bias))  # type: ignore[arg-type]
