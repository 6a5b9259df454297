"""The demo command (``python -m snowfall.sample_scenes.demo``) checks every argument before
any work: each bad one gets one line on stderr naming the argument, what is wrong and what
to try, exit status 2, nothing written, and bpy never imported (so these runs are quick)."""
import os
import subprocess
import sys

import pytest

from snowfall.sample_scenes import demo

MODULE = "snowfall.sample_scenes.demo"
#: Runs the demo as ``python -m`` does, then reports whether bpy was imported.
_WRAPPER = """
import runpy, sys
sys.argv = ["demo"] + sys.argv[1:]
try:
    runpy.run_module("{module}", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    print("bpy imported:", "bpy" in sys.modules)
    raise
"""


def _files(folder):
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, dirs, names in os.walk(folder) for name in dirs + names)


def _run_demo(tmp_path, *args):
    """(exit status, stdout, stderr) of the demo run in ``tmp_path``."""
    result = subprocess.run([sys.executable, "-c", _WRAPPER.format(module=MODULE), *args],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout, result.stderr


CASES = [
    # (arguments, the argument the line names, words it must hold)
    (["--flakes", "0"], "--flakes", ["0 flakes", "1 to"]),
    (["--flakes", "-7"], "--flakes", ["-7 flakes"]),
    (["--flakes", "3000000000"], "--flakes", ["3000000000 flakes"]),
    (["--frames", "0"], "--frames", ["0 frames"]),
    (["--frames", "-3"], "--frames", ["-3 frames"]),
    (["--frames", "abc"], "--frames", ["invalid int value: 'abc'"]),
    (["--resolution", "0", "0"], "--resolution", ["0 x 0 pixels", "4 to 65536"]),
    (["--resolution", "640", "100000"], "--resolution", ["640 x 100000"]),
    (["--resolution", "640"], "--resolution", ["expected 2 arguments"]),
    (["--frame", "500"], "--frame", ["frame 500 is not baked", "1 to 48"]),
    (["--frames", "10", "--frame", "11"], "--frame", ["frame 11 is not baked", "1 to 10"]),
    (["--frame", "0"], "--frame", ["frame 0 is not baked"]),
    (["--samples", "0"], "--samples", ["0 render samples"]),
    (["--scene", "glacier"], "--scene", ["invalid choice: 'glacier'", "box_test"]),
    (["--backend", "tpu"], "--backend", ["invalid choice: 'tpu'"]),
    (["--out", "picture.jpg"], "--out", ["'picture.jpg' is not a PNG"]),
    (["--out", "."], "--out", ["is not a PNG"]),
    (["--bogus"], "--bogus", ["unrecognized arguments"]),
]


@pytest.mark.parametrize("args, argument, words", CASES,
                         ids=[" ".join(case[0]) for case in CASES])
def test_a_bad_argument_gets_one_line_and_status_2(tmp_path, args, argument, words):
    before = _files(tmp_path)
    status, out, err = _run_demo(tmp_path, *args)
    assert status == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("demo: ") and argument in line and "(try " in line, line
    for word in words:
        assert word in line, line
    assert "Traceback" not in err
    assert out == "bpy imported: False\n"          # refused before bpy was imported
    assert _files(tmp_path) == before               # nothing written


def test_an_out_folder_that_cannot_be_written_is_refused(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    for out, says in ((str(blocker / "shots" / "demo.png"), "is a file, not a folder"),
                      ("/proc/snowfall_demo/demo.png", "cannot write in '/proc'")):
        before = _files(tmp_path)
        status, stdout, err = _run_demo(tmp_path, "--out", out)
        assert status == 2, err
        assert len(err.strip().splitlines()) == 1 and err.startswith("demo: --out: ")
        assert says in err and "(try a folder you can write" in err
        assert stdout == "bpy imported: False\n"
        assert _files(tmp_path) == before
    assert not os.path.exists("/proc/snowfall_demo")


def test_python_dash_m_gives_the_same_answer(tmp_path):
    """The real ``python -m`` entry, not the wrapper."""
    result = subprocess.run([sys.executable, "-m", MODULE, "--flakes", "0"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("demo: --flakes: 0 flakes") and result.stdout == ""
    assert _files(tmp_path) == []


def test_good_arguments_pass_the_checks(tmp_path):
    out = str(tmp_path / "new_folder" / "shot.png")
    args = demo.parse_arguments(["--scene", "ridge", "--frames", "12", "--frame", "12",
                                 "--flakes", "1", "--resolution", "4", "65536",
                                 "--samples", "1", "--out", out, "--backend", "cpu"])
    assert (args.scene, args.frames, args.frame, args.flakes) == ("ridge", 12, 12, 1)
    assert not os.path.exists(os.path.dirname(out))    # checking created nothing
    defaults = demo.parse_arguments(["--out", out])
    assert defaults.flakes is None and defaults.frame is None and defaults.frames == 48


def test_the_demo_knows_every_sample_scene():
    from snowfall.sample_scenes.build import SCENES

    assert set(demo.SCENE_NAMES) == set(SCENES)
