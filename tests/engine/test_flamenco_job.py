"""The Flamenco 3 job type farm/snowfall-bake-render.js, compiled under Node.js against a
stand-in for the Manager's documented job-type API (tests/engine/flamenco_harness.js):
one bake task, then render tasks in chunks that each depend on it, with the commands the
farm scripts understand. Skipped where Node.js is not installed."""
import json
import os
import shutil
import subprocess

import pytest

from snowfall.farm import FOLDER, snowfall_render
from snowfall.operators import headless

NODE = shutil.which("node") or shutil.which("nodejs")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (the job type "
                                "is JavaScript; install nodejs to run this test)")
JOB_TYPE = os.path.join(FOLDER, "snowfall-bake-render.js")
HARNESS = os.path.join(os.path.dirname(__file__), "flamenco_harness.js")


def settings(**changes):
    values = {"frames": "1-10", "chunk_size": 4, "bake_frame_start": 1, "bake_frame_end": 10,
              "cache_folder": "/shared/caches/shot010", "farm_scripts": "/shared/snowfall/farm",
              "bake_backend": "gpu", "bake_task_type": "snowfall-bake",
              "render_output_root": "/shared/render", "add_path_components": 0,
              "render_output_path": "/shared/render/shot010/{timestamp}/######",
              "blendfile": "/shared/shots/shot010.blend", "format": "PNG", "scene": "Scene"}
    values.update(changes)
    return values


def compile_jobs(*setting_sets):
    jobs = [{"settings": s, "created": "2026-11-27T21:30:00Z"} for s in setting_sets]
    done = subprocess.run([NODE, HARNESS, JOB_TYPE], input=json.dumps(jobs),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def script_args(command):
    """The farm script a blender-render command runs and the arguments after '--'."""
    args = command["parameters"]["args"]
    script = args[args.index("--python") + 1]
    return script, args[args.index("--") + 1:]


def test_bake_then_chunked_renders_that_depend_on_it():
    (result,) = compile_jobs(settings())
    tasks = result["tasks"]
    bake, renders = tasks[0], tasks[1:]
    assert bake["name"] == "snowfall-bake" and bake["type"] == "snowfall-bake"
    assert bake["dependencies"] == []
    (command,) = bake["commands"]
    assert command["type"] == "blender-render"
    assert command["parameters"]["exe"] == "{blender}"
    assert command["parameters"]["blendfile"] == "/shared/shots/shot010.blend"
    args = command["parameters"]["args"]
    assert args[:2] == ["--python-exit-code", "1"]     # a script that raises fails the task
    script, bake_args = script_args(command)
    assert script == "/shared/snowfall/farm/snowfall_bake.py"
    # The arguments are the headless bake's own: its parser takes them as they are.
    parsed = headless.build_parser().parse_args(["/shared/shots/shot010.blend", *bake_args])
    assert (parsed.frame_start, parsed.frame_end) == (1, 10)
    assert parsed.cache_folder == "/shared/caches/shot010"
    assert parsed.backend == "gpu" and parsed.scene == "Scene"
    assert parsed.resume_if_any and not parsed.resume   # a retried task continues the bake

    assert [t["name"] for t in renders] == ["render-1-4", "render-5-8", "render-9-10"]
    rendered = []
    for task in renders:
        assert task["type"] == "blender"
        assert task["dependencies"] == ["snowfall-bake"]
        (command,) = task["commands"]
        assert command["type"] == "blender-render"
        assert command["parameters"]["blendfile"] == "/shared/shots/shot010.blend"
        script, render_args = script_args(command)
        assert script == "/shared/snowfall/farm/snowfall_render.py"
        options = snowfall_render.parse_arguments(render_args)
        assert options.output == "/shared/render/shot010/20261127T213000/######"
        assert options.format == "PNG" and options.scene == "Scene"
        rendered += options.frame_list
    assert rendered == list(range(1, 11))       # every frame once, in order
    assert result["settings"]["render_output_path"] == \
        "/shared/render/shot010/20261127T213000/######"


def test_frame_lists_chunk_size_one_and_other_bake_task_types():
    results = compile_jobs(settings(frames="3, 5-6", chunk_size=1),
                           settings(frames="2-9", chunk_size=3, bake_task_type="blender",
                                    cache_folder=""),
                           settings(frames="1-10,20", chunk_size=5, bake_frame_end=20))
    names = [[t["name"] for t in r["tasks"]] for r in results]
    assert names[0] == ["snowfall-bake", "render-3", "render-5", "render-6"]
    assert names[1] == ["snowfall-bake", "render-2-4", "render-5-7", "render-8-9"]
    assert names[2] == ["snowfall-bake", "render-1-5", "render-6-10", "render-20"]
    assert results[1]["tasks"][0]["type"] == "blender"
    _, bake_args = script_args(results[1]["tasks"][0]["commands"][0])
    parsed = headless.build_parser().parse_args(["x.blend", *bake_args])
    assert parsed.cache_folder == ""            # the .blend's own cache folder
    for result in results:
        bake, *renders = result["tasks"]
        assert all(task["dependencies"] == [bake["name"]] for task in renders)


@pytest.mark.parametrize("changes, message", [
    ({"frames": "1-12"}, "frames: frame 11 lies outside the baked range 1-10"),
    ({"bake_frame_start": 0}, "bake_frame_start"),
    ({"bake_frame_end": 0}, "bake_frame_end"),
    ({"chunk_size": 0}, "chunk_size"),
    ({"farm_scripts": ""}, "farm_scripts"),
])
def test_bad_settings_are_refused_with_the_setting_named(changes, message):
    (result,) = compile_jobs(settings(**changes))
    assert message in result["error"]
    assert "tasks" not in result
