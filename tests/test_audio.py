import pytest

from sharflow.core.audio import PathEscapeError, probe_audio, resolve_audio_path
from testkit import write_tone


def test_relative_and_absolute_paths_inside_the_root(tmp_path):
    root = tmp_path / "root"
    full, rel = resolve_audio_path(str(root), "a/./b/../c.wav")
    assert full == str(root / "a" / "c.wav") and rel == "a/c.wav"
    assert resolve_audio_path(str(root), str(root / "x.wav")) == (str(root / "x.wav"), "x.wav")


@pytest.mark.parametrize("path", ["../x.wav", "a/../../x.wav", "/etc/passwd", "."])
def test_paths_leaving_the_root_are_refused(tmp_path, path):
    with pytest.raises(PathEscapeError, match="outside the audio root"):
        resolve_audio_path(str(tmp_path / "root"), path)


def test_sibling_folder_with_common_prefix_is_outside(tmp_path):
    with pytest.raises(PathEscapeError):
        resolve_audio_path(str(tmp_path / "root"), str(tmp_path / "root2" / "x.wav"))


def test_probe_reads_the_header(tmp_path):
    info = probe_audio(str(write_tone(tmp_path / "a.flac", 1.5, 22050)))
    assert (info.sampling_rate, info.num_samples, info.num_channels) == (22050, 33075, 1)
    assert info.duration == pytest.approx(1.5)
