"""Kopf's diff base with the spec as a digest: the topology does not hold its spec twice.

Kopf decides between a resume, an update and nothing by comparing the object's
"essence" (its spec, labels and annotations) with the essence it stored after the last
handling, and hands the update handlers the fields that changed. By default it stores
that essence whole in an annotation, a second copy of the spec that counts against the
256 KiB of annotations an object may carry. :class:`SpecDigestDiffBase` stores it with
the spec replaced by one digest of its whole content:

- any change of the spec changes the digest, so ``@kopf.on.update(field="spec")`` fires
  exactly when it did (its handler reads ``spec`` from the body, never ``old`` or
  ``new``), and an unchanged spec is a resume or nothing, as before;
- labels and annotations stay whole, so handlers of one annotation
  (``field=("metadata", "annotations", ...)``) still get its old and new value;
- a diff base written whole by an older operator is read as its digest form, so the
  first start after an upgrade resumes each topology instead of updating it (Kopf then
  stores nothing: the whole copy stays until the next change of the spec, the labels or
  the annotations, when the digest replaces it).

``metadata.generation`` against ``status.observedGeneration`` would tell a spec change
too, but Kopf needs a stored essence anyway (none means a creation), and the annotation
handlers need the annotations' old values.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

import kopf

DIGEST_KEY = "sha256"
"""The only key of the spec in a stored essence."""


def spec_digest(spec: Any) -> dict[str, str]:
    """The spec's stand-in in an essence: a SHA-256 of its canonical JSON.

    Examples
    --------
    >>> spec_digest({"b": 1, "a": [2]}) == spec_digest({"a": [2], "b": 1})
    True
    >>> spec_digest({"a": 1}) == spec_digest({"a": 2})
    False
    """
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return {DIGEST_KEY: hashlib.sha256(text.encode()).hexdigest()}


def _digested(essence: Any) -> Any:
    """``essence`` with its spec as a digest (a digest already there is kept)."""
    spec = essence.get("spec") if isinstance(essence, dict) else None
    if spec is None or (isinstance(spec, dict) and set(spec) == {DIGEST_KEY}):
        return essence
    return {**essence, "spec": spec_digest(spec)}


class SpecDigestDiffBase(kopf.AnnotationsDiffBaseStorage):
    """Kopf's annotation diff base, with the spec stored as :func:`spec_digest`."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        """The essence Kopf compares and stores, the spec as its digest."""
        essence = super().build(body=body, extra_fields=extra_fields)
        return cast(kopf.BodyEssence, _digested(essence))

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        """The stored essence, the spec as its digest (also when stored whole)."""
        essence = super().fetch(body=body)
        return None if essence is None else cast(kopf.BodyEssence, _digested(essence))
