"""The panel's Resume button follows the bake folder, not the .blend: it is enabled when the
scene's cache folder holds a committed frame short of the end frame (also after a crash,
with the .blend never saved), and disabled for no bake, a finished bake, a record that
cannot be read, or an unsaved file with a blend-relative cache folder."""
import os

import bpy

from snowfall.operators.bake import BakeJob
from snowfall.properties import resume_available, scene_bake_folder
from snowfall.snow_addon import bake_cache


class _Layout:
    """Records what draw_snowfall asks of a layout: the ``enabled`` of each operator's row."""

    def __init__(self, log, parent=None):
        self.log, self.enabled, self.active = log, True, True
        self.use_property_split = self.use_property_decorate = False
        self._parent = parent

    def _on(self):
        return self.enabled and (self._parent is None or self._parent._on())

    def _child(self, *_args, **_kwargs):
        return _Layout(self.log, self)

    row = column = box = split = _child

    def operator(self, name, **_kwargs):
        self.log[name] = self._on()

    def prop(self, *_args, **_kwargs):
        pass

    label = progress = prop


def _resume_button(scene):
    from snowfall.panels.main import draw_snowfall

    log = {}
    draw_snowfall(_Layout(log), bpy.context)
    return log["snowfall.resume"]


def _stop_after(frames):
    job = BakeJob(bpy.context)
    for _ in range(frames - 1):
        job.advance_frame()
    job.cancel()


def test_resume_follows_the_bake_folder(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path / "cache", frames=5)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    folder = scene_bake_folder(scene)
    assert folder == os.path.join(str(tmp_path / "cache"), "Scene")
    blend = str(tmp_path / "unbaked.blend")
    bpy.ops.wm.save_as_mainfile(filepath=blend, copy=True)
    assert not resume_available(scene) and not _resume_button(scene)     # nothing baked

    _stop_after(3)                                      # Esc after frame 3
    assert resume_available(scene) and _resume_button(scene)
    assert bake_cache.resume_available(folder, 5)
    assert not bake_cache.resume_available(folder, 3)   # the end frame is reached

    # A crash: the .blend never saw the bake. Opened, it picks the bake up from the folder
    # (frames 1-3), and the folder still offers Resume.
    bpy.ops.wm.open_mainfile(filepath=blend)
    scene = bpy.context.scene
    assert scene.snowfall.has_bake and scene.snowfall.baked_frame_end == 3
    assert resume_available(scene) and _resume_button(scene)
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert not resume_available(scene) and not _resume_button(scene)   # finished
    scene.frame_end = 7                                 # a later end frame: Resume extends
    assert resume_available(scene) and _resume_button(scene)
    scene.frame_end = 5

    # A progress record that cannot be read, or none: no Resume to offer.
    progress = os.path.join(folder, bake_cache.PROGRESS_NAME)
    scene.frame_end = 7
    with open(progress, "r+b") as handle:
        data = handle.read()
        handle.seek(0)
        handle.write(b"{not json" + data[9:])
    assert not resume_available(scene) and not _resume_button(scene)
    os.unlink(progress)
    assert not resume_available(scene)
    assert not bake_cache.resume_available(str(tmp_path / "nowhere"), 7)


def test_resume_is_not_offered_for_an_unsaved_file_with_a_relative_folder(addon, tools):
    scene = addon
    tools.small_settings(scene, "//snowfall_cache", frames=3)
    assert bpy.data.filepath == ""
    assert scene_bake_folder(scene) is None
    assert not resume_available(scene) and not _resume_button(scene)
