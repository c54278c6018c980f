"""Which Secrets a pipeline version refers to. Purely computational.

A data secret cannot be deleted while the current version of one of the tenant's pipelines
refers to it (409 naming the pipelines), and a rollback cannot make current a version that
refers to one that no longer exists. A version refers to Secrets in three places:

- its **template** (the stamped WorkflowTemplate as applied): every place Kubernetes or Argo
  reads a Secret by name, wherever it sits in the document (containers, init containers,
  sidecars, container sets, ``templateDefaults``, inline templates, volumes):
  ``secretKeyRef.name`` (env), ``secretRef.name`` (envFrom, and volume drivers), ``secretName``
  (secret volumes), ``imagePullSecrets[].name``, a projected volume's ``secret.name``, and any
  ``...Secret``/``...SecretRef`` object with a ``name`` (Argo's artifact credentials
  ``accessKeySecret``, ``passwordSecret``, ``nodePublishSecretRef``...). The allowlist refuses
  most of these at save; they are read here anyway, so a reference is never missed because
  the allowlist changed;
- its **definition**: a Git definition's ``credentials_secret``, the wizard's
  ``from_secret: {name, key}``;
- its **settings** (``schedule``, ``triggers``, ``notifications``): any field named ``secret``
  or ``<something>_secret`` (a notification channel's ``secret``), as a name or an object with a
  ``name``.

The walk reads every mapping and list, so it errs towards finding a reference (a delete
refused) rather than missing one (a pipeline left referring to nothing). ``MAX_DEPTH`` bounds
it: documents were bounded when they were saved.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

MAX_DEPTH: Final = 64
# In a template, a key whose object value names a Secret by ``name``.
_OBJECT_KEYS: Final = frozenset({"secret", "secretRef", "secretKeyRef"})
_OBJECT_SUFFIXES: Final = ("Secret", "SecretRef")
# In a definition or settings (snake case, the platform's own fields), a key whose value is a
# Secret's name, or an object with its name.
_SETTING_SUFFIX: Final = "_secret"


def _names_of(value: object) -> Iterator[str]:
    """The name in an object reference ``{"name": ...}``."""
    if isinstance(value, Mapping):
        name = value.get("name")
        if isinstance(name, str) and name:
            yield name


def _walk(value: object, depth: int, *, settings: bool) -> Iterator[str]:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, list):
        for item in value:
            yield from _walk(item, depth + 1, settings=settings)
        return
    if not isinstance(value, Mapping):
        return
    for key, item in value.items():
        if not isinstance(key, str):
            continue
        if key in _OBJECT_KEYS or key.endswith(_OBJECT_SUFFIXES):
            yield from _names_of(item)
        elif key == "secretName" and isinstance(item, str) and item:
            yield item
        elif key == "imagePullSecrets" and isinstance(item, list):
            for entry in item:
                yield from _names_of(entry)
        if settings and (key == "secret" or key.endswith(_SETTING_SUFFIX)):
            if isinstance(item, str) and item:
                yield item
            else:
                yield from _names_of(item)
        yield from _walk(item, depth + 1, settings=settings)


def in_template(template: object) -> frozenset[str]:
    """The names of the Secrets a WorkflowTemplate refers to."""
    return frozenset(_walk(template, 0, settings=False))


def in_definition(definition: object) -> frozenset[str]:
    """The names of the Secrets a pipeline's definition refers to (Git credentials, the
    wizard's ``from_secret``)."""
    return frozenset(_walk(definition, 0, settings=True))


def in_settings(settings: object) -> frozenset[str]:
    """The names of the Secrets a version's settings refer to (notification channels...)."""
    return frozenset(_walk(settings, 0, settings=True))


def of_version(template: object, definition: object, settings: object) -> frozenset[str]:
    """Every Secret a pipeline version refers to: its template, definition and settings."""
    return in_template(template) | in_definition(definition) | in_settings(settings)


def users(secret: str, versions: Mapping[str, tuple[Any, Any, Any]]) -> list[str]:
    """The keys of ``versions`` (``{pipeline: (template, definition, settings)}``) whose
    version refers to ``secret``, in order."""
    return [key for key, parts in versions.items() if secret in of_version(*parts)]
