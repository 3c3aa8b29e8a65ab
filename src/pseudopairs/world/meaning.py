"""What each caption of the demo world says about its scene: the details of its
:class:`~pseudopairs.world.grammar.CaptionSpec`, as rows of ``results/world/caption_meanings.parquet``
(written by the ``world`` step beside the manifest's scenes; read by the pseudopair precision of
:mod:`pseudopairs.mining.precision`).

A caption's meaning is a list of *details* ``(mention, attribute, value)``:

* an object mention (``mention`` = its position among the spec's mentions, 0, 1, …) has the
  *head* detail ``kind`` (what the mention is about) and one detail per attribute it mentions:
  ``count`` (``"1"`` for "a", the number for "two"/"three", ``"2+"`` = at least two for
  "some"/"several"), and every attribute that :class:`Mention` and :class:`ObjectGroup` both
  name (``colour``, ``size``, ``texture``: mentioned when the mention's field is not ``None`` /
  ``False``; the value is the group's);
* the background mention (``mention`` = :data:`BACKGROUND`) has the head detail ``background``
  and ``background_colour`` when its colour adjective is used.

A new attribute needs nothing here when :class:`Mention` and :class:`ObjectGroup` give it the
same field name, else one entry of :data:`OBJECT_DETAILS` or :data:`BACKGROUND_DETAILS`.
Values are strings; ``"N+"`` means "at least N" (:func:`holds`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from pseudopairs.world.grammar import BackgroundMention, CaptionSpec, Mention, ObjectGroup

MEANING_COLUMNS = ["corpus", "split", "image_id", "lang", "caption_idx", "mention", "attribute", "value"]
BACKGROUND = -1  # the ``mention`` of a background detail
HEADS = {"object": "kind", "background": "background"}  # the detail that says what a mention is about
PLURAL = "2+"


def said_count(quantity: str, count: int) -> str:
    """What a quantity word says about a group of ``count`` objects: its exact number ("a",
    a number word) or :data:`PLURAL` ("some", "several")."""
    if quantity in ("a", "number"):
        return str(count)
    if quantity in ("some", "several"):
        return PLURAL
    raise ValueError(f"caption spec: unknown quantity {quantity!r} (expected a, number, some, several)")


def _shared_field(name: str) -> Callable[[Mention, ObjectGroup], str | None]:
    def detail(mention: Mention, group: ObjectGroup) -> str | None:
        said = getattr(mention, name)
        return None if said is None or said is False else str(getattr(group, name))

    return detail


# attribute -> (mention, group) -> the value the caption says, or None when it does not say it;
# the head first. Fields that Mention and ObjectGroup share (colour, size, texture, and any
# added to both) are read generically.
OBJECT_DETAILS: dict[str, Callable[[Mention, ObjectGroup], str | None]] = {
    "kind": lambda mention, group: group.kind,
    "count": lambda mention, group: said_count(mention.quantity, group.count),
    **{f.name: _shared_field(f.name) for f in dataclasses.fields(ObjectGroup)
       if f.name in {m.name for m in dataclasses.fields(Mention)}},
}
# attribute -> (background mention, background, background colour) -> said value or None
BACKGROUND_DETAILS: dict[str, Callable[[BackgroundMention, str, str], str | None]] = {
    "background": lambda mention, background, colour: background,
    "background_colour": lambda mention, background, colour: colour if mention.adjective else None,
}
ATTRIBUTES = (*OBJECT_DETAILS, *BACKGROUND_DETAILS)  # every attribute a caption can mention, in order


def caption_meaning(spec: CaptionSpec, *, groups: Sequence[ObjectGroup], background: str,
                    background_colour: str) -> list[tuple[int, str, str]]:
    """The details ``(mention, attribute, value)`` a caption realised from ``spec`` says about
    its scene (the module docstring), heads first within each mention."""
    details = []
    for m, mention in enumerate(spec.mentions):
        group = groups[mention.group]
        for attribute, say in OBJECT_DETAILS.items():
            value = say(mention, group)
            if value is not None:
                details.append((m, attribute, value))
    if spec.background is not None:
        for attribute, say in BACKGROUND_DETAILS.items():
            value = say(spec.background, background, background_colour)
            if value is not None:
                details.append((BACKGROUND, attribute, value))
    return details


def holds(said: str, actual: Any) -> bool:
    """Whether a said value is true of the scene's value: equal as text, or for ``"N+"`` a whole
    number at least N."""
    if said.endswith("+") and said[:-1].isdigit():
        try:
            return int(actual) >= int(said[:-1])
        except (TypeError, ValueError):
            return False
    return said == str(actual)


def scene_subjects(scene: Mapping[str, Any]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """What a mention can be about in one scene (a manifest record: ``background``,
    ``background_colour``, ``objects`` with each group's attributes): ``(head attribute, head
    value)`` → the records carrying it (each object group under ``("kind", its kind)``, the scene
    itself under ``("background", its background)``)."""
    subjects: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    head = HEADS["background"]
    subjects[head, str(scene[head])] = [scene]
    for group in scene["objects"]:
        subjects.setdefault((HEADS["object"], str(group[HEADS["object"]])), []).append(group)
    return subjects
