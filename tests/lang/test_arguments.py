"""What ``parse`` and ``load`` are given, before any text is read: a wrong type, a file that is
missing, a directory, unreadable or not UTF-8, a byte-order mark. Each ends in a ``ParseError``
that says what to do, never in a Python exception from inside."""
import pathlib
import re

import pytest

from metasched.errors import ParseError
from metasched.lang import load, parse
from metasched.lang import parser as parser_module

TEXT = "workload t(N = 4) {\n    input X: float32[N]\n    output Y[i] = X[i] * 2.0\n}\n"
# The same workload with an error on line 1 (the parameter's default is not an integer).
BAD_LINE_1 = TEXT.replace("N = 4", "N = 4.5")


@pytest.mark.parametrize("text, message", [
    (None, r"^parse needs the workload's text as a str, got None \(to read a file use metasched.load\(path\)\)$"),
    (42, r"^parse needs the workload's text as a str, got int"),
    (TEXT.encode(), r"got bytes; decode bytes first, e.g. parse\(data.decode\(\"utf-8\"\)\)"),
    (bytearray(TEXT.encode()), r"got bytearray; decode bytes first"),
    (pathlib.Path("t.tensor"), r"got \w*Path; to read a file use metasched.load\(path\)"),
    (["workload"], r"got list"),
], ids=["none", "int", "bytes", "bytearray", "path", "list"])
def test_parse_wants_a_str(text, message):
    with pytest.raises(ParseError) as info:
        parse(text)
    assert (info.value.line, info.value.file) == (0, "<string>")
    assert re.search(message, info.value.message), info.value.message


@pytest.mark.parametrize("name", [42, b"t", ["t"]])
def test_the_name_must_be_a_str_or_none(name):
    with pytest.raises(ParseError, match=r"the workload's name must be a str \(or None for the only one\), got "):
        parse(TEXT, name)


def test_a_byte_order_mark_is_skipped_and_columns_stay_as_an_editor_shows_them():
    assert parse("\ufeff" + TEXT) == parse(TEXT)
    assert parse("\ufeff" + TEXT).source == TEXT
    with pytest.raises(ParseError) as plain:
        parse(BAD_LINE_1)
    with pytest.raises(ParseError) as marked:
        parse("\ufeff" + BAD_LINE_1)
    assert (marked.value.line, marked.value.column) == (plain.value.line, plain.value.column) == (1, 16)
    assert str(marked.value) == str(plain.value)


def test_only_a_leading_byte_order_mark_is_skipped():
    with pytest.raises(ParseError, match=r"unexpected character '\\ufeff'") as info:
        parse(TEXT.replace("    output", "\ufeff    output"))
    assert (info.value.line, info.value.column) == (3, 1)


def test_load_reads_a_utf8_file_with_or_without_a_byte_order_mark(tmp_path):
    plain, marked = tmp_path / "plain.tensor", tmp_path / "marked.tensor"
    plain.write_bytes(TEXT.encode())
    marked.write_bytes(b"\xef\xbb\xbf" + TEXT.encode())
    assert load(plain) == load(marked) == load(str(marked)) == load(bytes(marked)) == parse(TEXT)
    bad = tmp_path / "bad.tensor"
    bad.write_bytes(b"\xef\xbb\xbf" + BAD_LINE_1.encode())
    with pytest.raises(ParseError) as info:
        load(bad)
    assert str(info.value).startswith(f"{bad}:1:16: ")


def test_a_missing_file(tmp_path):
    path = tmp_path / "nope.tensor"
    with pytest.raises(ParseError) as info:
        load(path)
    assert (info.value.file, info.value.line) == (str(path), 0)
    assert str(info.value) == f"{path}: no such file"


def test_a_directory(tmp_path):
    with pytest.raises(ParseError) as info:
        load(tmp_path)
    assert str(info.value) == f"{tmp_path}: this is a directory, not a .tensor file"


def _refusing_open(error):
    def fake_open(*args, **kwargs):
        raise error
    return fake_open


@pytest.mark.parametrize("error, message", [
    (PermissionError(13, "Permission denied"), "permission denied: cannot read this file"),
    (OSError(36, "File name too long"), "cannot read this file: File name too long"),
], ids=["permission", "other"])
def test_a_file_the_system_will_not_read(tmp_path, monkeypatch, error, message):
    # Tests may run as root, who may read anything: the refusal is simulated.
    path = tmp_path / "locked.tensor"
    path.write_text(TEXT)
    monkeypatch.setattr(parser_module, "open", _refusing_open(error), raising=False)
    with pytest.raises(ParseError) as info:
        load(path)
    assert str(info.value) == f"{path}: {message}"


def test_a_file_that_is_not_utf8_says_where_the_bad_byte_is(tmp_path):
    path = tmp_path / "latin1.tensor"
    path.write_bytes(TEXT.replace("output Y", "output é").encode("latin-1"))
    with pytest.raises(ParseError) as info:
        load(path)
    e = info.value
    offset = TEXT.index("Y[i] =")
    assert e.message == f"not valid UTF-8: byte 0xe9 at byte offset {offset}; a .tensor file must be UTF-8 text"
    assert (e.file, e.line, e.column) == (str(path), 3, 12)
    assert str(e).split("\n")[1:] == ["        output \ufffd[i] = X[i] * 2.0", "               ^"]


def test_a_bad_byte_after_multibyte_characters_is_counted_in_characters(tmp_path):
    path = tmp_path / "mixed.tensor"
    path.write_bytes(b"\xef\xbb\xbf# \xc3\xa9\xc3\xa9 \xff\n" + TEXT.encode())
    with pytest.raises(ParseError) as info:
        load(path)
    # The mark is not counted; "# éé " is five characters (seven bytes).
    assert (info.value.line, info.value.column) == (1, 6)
    assert "byte 0xff at byte offset 10" in info.value.message


@pytest.mark.parametrize("path", [None, 42, ["t.tensor"]])
def test_load_wants_a_path(path):
    with pytest.raises(ParseError, match=r"load needs the path of a .tensor file \(a str or os.PathLike\), got "):
        load(path)
