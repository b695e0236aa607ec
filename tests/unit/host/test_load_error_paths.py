"""What a tenant's user may read of a bundle's load error: the message without the host's file paths."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from berth.host.errors import LoadError, without_paths

segment = st.text(alphabet=st.sampled_from("abcXYZ019_-."), min_size=1, max_size=10).filter(
    lambda s: s not in {".", ".."}
)
file_name = st.builds(lambda stem, ext: f"{stem}.{ext}", segment, st.sampled_from(["py", "csv", "yaml", "txt"]))
posix_path = st.builds(
    lambda folders, name: "/" + "/".join([*folders, name]), st.lists(segment, min_size=1, max_size=5), file_name
)
windows_path = st.builds(
    lambda drive, folders, name: f"{drive}:\\" + "\\".join([*folders, name]),
    st.sampled_from("CDE"),
    st.lists(segment, min_size=1, max_size=4),
    file_name,
)
framing = st.sampled_from(["{}", "'{}'", '"{}"', "({})", "[{}]", "{}:12", "{},", "{};"])
prose = st.text(alphabet=st.sampled_from("abc XYZ:=1"), max_size=20)


@given(before=prose, path=st.one_of(posix_path, windows_path), frame=framing, after=prose)
@settings(max_examples=400)
def test_every_absolute_path_is_cut_to_its_file_name(before: str, path: str, frame: str, after: str) -> None:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    folder = path[: -len(name)]
    message = f"{before} {frame.format(path)} {after}"
    public = without_paths(message)
    assert folder not in public, public
    assert frame.format(name) in public
    assert public == f"{before} {frame.format(name)} {after}"


def test_text_without_paths_is_left_alone() -> None:
    for text in ("ZeroDivisionError: division by zero", "1/2 and/or a/b", "see https://e.example/a/b", "a / b", "~/x"):
        assert without_paths(text) == text


def test_a_load_error_shows_users_the_file_name_and_operators_the_path() -> None:
    error = LoadError(
        "bundle_import_failed",
        "ImportError: cannot import name 'x' from 'pkg' (/srv/bundles/pkg/__init__.py)",
        "/srv/bundles/pkg/__init__.py",
        3,
    )
    assert error.public_message() == "ImportError: cannot import name 'x' from 'pkg' (__init__.py)"
    assert "/srv/bundles/pkg/__init__.py:3" in str(error)
