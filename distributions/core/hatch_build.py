"""Build hook of ``migronaut-core``: the wheel and the sdist carry ``migronaut_core``.

The package lives at the repository's top level, two folders up, and the hook
adds it from there; an unpacked sdist holds it beside this file, where the
wheel's ``only-include`` finds it. Editable installs put the top level on the
path (``dev-mode-dirs``), so the hook adds nothing to them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = "migronaut_core"


class IncludePackage(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        in_tree = Path(self.root).parent.parent / PACKAGE
        if in_tree.is_dir():
            build_data["force_include"][str(in_tree)] = PACKAGE
