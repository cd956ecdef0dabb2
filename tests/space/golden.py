"""Golden files: expected text kept next to the tests, regenerated on request."""
import os
import pathlib


def check_golden(path: pathlib.Path, text: str) -> None:
    """Assert that ``path`` holds ``text``; with ``METASCHED_UPDATE_GOLDEN=1`` in the
    environment, write ``text`` there instead (creating the folders)."""
    if os.environ.get("METASCHED_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no golden file {path}: run with METASCHED_UPDATE_GOLDEN=1 to create it"
    assert path.read_text() == text, f"{path} differs; run with METASCHED_UPDATE_GOLDEN=1 if the change is intended"
