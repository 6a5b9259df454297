"""Falling snow that reads as snow in Cycles: flakes of varied size in a soft, translucent
white material, a one-click render setup (motion blur with a short shutter), and
camera-only flakes that thin out with distance, the same flakes every frame."""
import bpy
import numpy as np
import pytest

from snowfall.operators import particle_output
from snowfall.operators.flake_material import FLAKE_MATERIAL_NAME
from snowfall.snow_addon.formats import frame_store


def _camera(scene, ortho=False):
    camera = bpy.data.objects.new("Camera", bpy.data.cameras.new("Camera"))
    scene.collection.objects.link(camera)
    if ortho:
        camera.data.type = "ORTHO"
    camera.location = (0.0, 0.0, 0.0)          # looking down -Z
    scene.camera = camera
    bpy.context.view_layer.update()
    return camera


def test_far_flakes_thin_out_with_distance_deterministically(addon):
    """Nearer than the full density distance every flake in view is written; beyond it a
    share (distance / depth)^2, the same flakes every time; an orthographic camera and a
    view without falloff keep all."""
    scene = addon
    _camera(scene)
    view = particle_output.camera_view(scene, margin=0.0, falloff=10.0)
    assert view["falloff"] == 10.0
    rng = np.random.default_rng(0)
    count = 200_000
    depth = rng.uniform(1.0, 80.0, count).astype(np.float32)
    positions = np.stack([rng.uniform(-0.1, 0.1, count) * depth,
                          rng.uniform(-0.1, 0.1, count) * depth, -depth], axis=1)
    positions = positions.astype(np.float32)
    kept = frame_store.in_camera_view(positions, view)
    np.testing.assert_array_equal(kept, frame_store.in_camera_view(positions, view))
    assert kept[depth < 10.0].all()
    for near, far in ((19.0, 21.0), (39.0, 41.0), (70.0, 80.0)):
        band = (depth > near) & (depth < far)
        expected = np.mean((10.0 / depth[band]) ** 2)
        assert kept[band].mean() == pytest.approx(expected, rel=0.08), (near, far)
    # A flake is kept or not by its number: moved nearer, a kept flake stays kept.
    closer = positions * np.float32(0.9)
    assert frame_store.in_camera_view(closer, view)[kept].all()
    no_falloff = particle_output.camera_view(scene, margin=0.0, falloff=None)
    assert "falloff" not in no_falloff
    assert frame_store.in_camera_view(positions, no_falloff).all()


def test_camera_view_takes_the_falloff_from_the_scene_settings(addon):
    scene = addon
    props = scene.snowfall
    camera = _camera(scene)
    props.camera_falloff_distance = 12.0
    assert particle_output.camera_view(scene)["falloff"] == pytest.approx(12.0)
    props.use_camera_falloff = False
    assert "falloff" not in particle_output.camera_view(scene)
    props.use_camera_falloff = True
    camera.data.type = "ORTHO"                 # flakes do not shrink: no thinning
    assert "falloff" not in particle_output.camera_view(scene)


def test_flakes_vary_in_size_in_a_soft_translucent_material(addon, tmp_path):
    scene = addon
    emitter = particle_output.ensure_flake_system(scene, "Flakes", 100, flake_size=0.05,
                                                  cache_dir=str(tmp_path))
    settings = particle_output.flake_particle_system(emitter).settings
    assert settings.particle_size == pytest.approx(0.05)
    assert settings.size_random == pytest.approx(particle_output.FLAKE_SIZE_RANDOM)
    assert settings.size_random >= 0.5                 # a third to all of the size
    material = bpy.data.materials[FLAKE_MATERIAL_NAME]
    assert settings.instance_object.data.materials[0] == material
    kinds = {node.type for node in material.node_tree.nodes}
    assert {"BSDF_TRANSLUCENT", "BSDF_TRANSPARENT", "LAYER_WEIGHT",
            "BSDF_PRINCIPLED"} <= kinds
    assert "EMISSION" not in kinds
    output = next(n for n in material.node_tree.nodes if n.type == "OUTPUT_MATERIAL")
    surface = output.inputs["Surface"].links[0].from_node
    assert surface.type == "MIX_SHADER"        # lit flake fading to transparent at its rim
    # An older file's flake material gets the new look on the next bake.
    particle_output.ensure_flake_system(scene, "Flakes", 100, flake_size=0.05,
                                        cache_dir=str(tmp_path))
    assert len([n for n in material.node_tree.nodes if n.type == "OUTPUT_MATERIAL"]) == 1


def test_setup_render_sets_motion_blur_with_a_short_shutter(addon, tools):
    scene = addon
    scene.render.engine = "CYCLES"
    scene.render.use_motion_blur = False
    tools.grid_object(size=(20.0, 20.0))
    bpy.ops.snowfall.set_terrain()
    camera = _camera(scene)
    camera.location = (10.0, -20.0, 10.0)
    bpy.context.view_layer.update()
    assert bpy.ops.snowfall.setup_render() == {"FINISHED"}
    assert scene.render.use_motion_blur is True
    assert scene.render.motion_blur_shutter == pytest.approx(0.25)
    assert scene.cycles.transparent_max_bounces >= 32
    assert camera.data.dof.use_dof is False
    assert bpy.ops.snowfall.setup_render(depth_of_field=True, shutter=0.5) == {"FINISHED"}
    assert scene.render.motion_blur_shutter == pytest.approx(0.5)
    assert camera.data.dof.use_dof is True
    centre = np.array([10.0, 10.0, 0.5])
    assert camera.data.dof.focus_distance == pytest.approx(
        np.linalg.norm(np.array(camera.location) - centre), rel=0.05)
