"""Issue 7, checkpoint discovery: whatever the chief's ``checkpoint`` state file holds, discovery
never raises. An entry that names no path (a bad escape, bytes that are not UTF-8, a NUL) is
skipped with the reason, and the next good checkpoint is used."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from launcher.chief.checkpoints import (
    Checkpoint,
    LocalFS,
    Skipped,
    latest_checkpoint,
    read_state,
    step_of,
)


def write_ckpt(directory: Path, step: int) -> str:
    prefix = directory / f"ckpt-{step}"
    Path(f"{prefix}.index").write_bytes(b"index")
    Path(f"{prefix}.data-00000-of-00001").write_bytes(b"tensors")
    return str(prefix)


UNDECODABLE = {
    "hex escape without digits": ("ckpt-1\\x", "the escape \\x lacks its hex digits"),
    "hex escape with bad digits": ("ckpt-1\\xzz", "the escape \\x lacks its hex digits"),
    "lone backslash at the end": ("ckpt-1\\", "a lone backslash ends the quoted path"),
    "unknown escape": ("ckpt-1\\q", "unknown escape \\q"),
    "octal over a byte": ("ckpt-\\777", "the escape \\777 is not a byte"),
    "surrogate escape": ("ckpt-\\ud800", "the escape \\ud800 is not a character"),
    "short unicode escape": ("ckpt-\\u12", "the escape \\u lacks its hex digits"),
    "bytes that are not UTF-8": ("ckpt-\\3031", "its bytes are not UTF-8"),
    "a NUL byte": ("ckpt\\0-1", "it contains a NUL byte"),
    "an unescaped quote": ('ckpt"-1', 'an unescaped " inside the quoted path'),
}


@pytest.mark.parametrize(("written", "why"), UNDECODABLE.values(), ids=UNDECODABLE.keys())
def test_an_undecodable_entry_is_skipped_with_the_reason(written: str, why: str) -> None:
    entries = read_state(f'model_checkpoint_path: "{written}"\n'
                         'all_model_checkpoint_paths: "ckpt-0"\n')
    assert entries.paths == ("ckpt-0",)
    assert entries.unreadable == (Skipped(written, f"unreadable entry in the state file: {why}"),)
    assert read_state(f'model_checkpoint_path: "{written}"\n').paths == ()


DECODED = {
    "octal UTF-8": ("mod\\303\\250le-1", "modèle-1"),
    "hex": ("ckpt\\x2d1", "ckpt-1"),
    "one-letter escapes": ("a\\tb\\\\c\\'d\\\"e\\?", "a\tb\\c'd\"e?"),
    "unicode escapes": ("\\u00e9\\U0001F600", "é😀"),
    "plain": ("/data/ckpt-7", "/data/ckpt-7"),
}


@pytest.mark.parametrize(("written", "path"), DECODED.values(), ids=DECODED.keys())
def test_protobuf_text_escapes_are_decoded(written: str, path: str) -> None:
    assert read_state(f'model_checkpoint_path: "{written}"\n').paths == (path,)


def test_discovery_falls_back_past_an_undecodable_latest_entry(tmp_path: Path) -> None:
    older = write_ckpt(tmp_path, 1)
    write_ckpt(tmp_path, 2)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-2\\x"\n'
                                         'all_model_checkpoint_paths: "ckpt-1"\n'
                                         'all_model_checkpoint_paths: "ckpt-2\\x"\n')
    found = latest_checkpoint(str(tmp_path))
    # ckpt-2 is still found on disk by its .index file, after what the state file names
    assert found.checkpoint == Checkpoint(older, 1)
    assert found.skipped[0] == Skipped("ckpt-2\\x", "unreadable entry in the state file: the "
                                       "escape \\x lacks its hex digits")


def test_a_nul_in_the_state_file_never_reaches_the_file_system(tmp_path: Path) -> None:
    write_ckpt(tmp_path, 3)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt\\000-9"\n')
    found = latest_checkpoint(str(tmp_path))
    assert found.checkpoint == Checkpoint(f"{tmp_path}/ckpt-3", 3)
    assert [s.reason for s in found.skipped] == ["unreadable entry in the state file: it contains "
                                                 "a NUL byte"]


def test_a_huge_undecodable_entry_is_quoted_short(tmp_path: Path) -> None:
    entries = read_state('model_checkpoint_path: "' + "a" * 100_000 + '\\x"\n')
    (skipped,) = entries.unreadable
    assert len(skipped.prefix) < 300 and skipped.prefix.endswith("(100002 characters)")


def test_the_local_fs_answers_none_for_a_path_with_a_nul() -> None:
    fs = LocalFS()
    assert (fs.read_text("/tmp/a\0b"), fs.listdir("/tmp/a\0b"), fs.size("/tmp/a\0b")) == \
        (None, None, None)
    assert fs.is_dir("/tmp/a\0b") is False


@pytest.mark.parametrize(("path", "step"), [
    ("ckpt-" + "9" * 19, int("9" * 19)),
    ("ckpt-" + "9" * 20, None),
    ("ckpt-" + "9" * 5000, None),  # int() of more than 4300 digits would raise
])
def test_step_numbers_are_int64_sized(path: str, step: int | None) -> None:
    assert step_of(path) == step


@pytest.mark.timeout(30)
def test_garbage_state_files_never_raise(tmp_path: Path) -> None:
    write_ckpt(tmp_path, 1)
    rng = random.Random(7)
    alphabet = ['"', "\\", "x", "u", "U", "0", "7", "9", "a", "-", "\n", "\0", "é", "\ud800", " "]
    for _ in range(300):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))
        text = f'model_checkpoint_path: "{value}"\nall_model_checkpoint_paths: "{value}"\n'
        read_state(text)
        (tmp_path / "checkpoint").write_text(text, encoding="utf-8", errors="surrogatepass")
        found = latest_checkpoint(str(tmp_path))
        assert found.checkpoint is not None
