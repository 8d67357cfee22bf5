"""How every migronaut trigger serializes: its classpath and the keywords that rebuild it.

The triggerer rebuilds a trigger as ``Class(**kwargs)`` from what ``serialize()``
returned, so the keywords must be exactly ``__init__``'s. Each trigger names
them once, in :attr:`RebuiltFromFields.rebuild_fields` (attributes of the same
name hold the values); ``tests/airflow/triggers/test_serialization.py`` checks
the names against every trigger's ``__init__`` and the round trip.
"""

from __future__ import annotations

from typing import Any, ClassVar


class RebuiltFromFields:
    """Mixin (listed before ``BaseTrigger``): ``serialize()`` from ``rebuild_fields``."""

    #: The ``__init__`` keywords that rebuild the trigger, each held by an attribute.
    rebuild_fields: ClassVar[tuple[str, ...]]

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and the keyword arguments that rebuild this trigger."""
        cls = type(self)
        kwargs = {name: getattr(self, name) for name in self.rebuild_fields}
        return f"{cls.__module__}.{cls.__qualname__}", kwargs
