"""Building the sample scenes in Blender: a terrain object from the engine's procedural
terrains (snow_addon/scenes.py), a camera, a sun, a sky, and Snowfall settings a new user
can bake at once. Used by the runnable scene modules and by the demo.

Every scene renders falling snow the way the add-on's Flakes panel sets it up: flakes only
where the camera sees them, thinning out beyond ``FULL_DENSITY`` of the camera's distance
(``camera_falloff_distance``), their radius automatic (from the camera's distance to the
terrain), and Cycles motion blur with a half-frame shutter (operators/render_setup.py).
The amount of snow is each scene's snowfall rate (Amount: Snowfall Rate), as the drift
validation scenes and the README's figures were made with."""
from __future__ import annotations

import math

import bpy
import numpy as np
from mathutils import Vector

from ..blender_compat import node_tree, principled_material, transparent_where
from ..snow_addon import scenes


def mesh_object(name: str, vertices, triangles, collection=None) -> bpy.types.Object:
    """A mesh object from (N, 3) vertices and (M, 3) triangles, smooth shaded."""
    vertices = np.asarray(vertices, dtype=np.float32)
    triangles = np.asarray(triangles, dtype=np.int32)
    mesh = bpy.data.meshes.new(name)
    mesh.vertices.add(len(vertices))
    mesh.vertices.foreach_set("co", vertices.ravel())
    mesh.loops.add(triangles.size)
    mesh.loops.foreach_set("vertex_index", triangles.ravel())
    mesh.polygons.add(len(triangles))
    mesh.polygons.foreach_set("loop_start", np.arange(0, triangles.size, 3, dtype=np.int32))
    mesh.update(calc_edges=True)
    mesh.validate()
    mesh.shade_smooth()
    obj = bpy.data.objects.new(name, mesh)
    (collection or bpy.context.scene.collection).objects.link(obj)
    return obj


def aim(obj, target) -> None:
    """Point a camera or light at ``target`` (world space)."""
    direction = Vector(target) - obj.location
    obj.rotation_euler = direction.to_track_quat("-Z", "Y").to_euler()


def _camera_and_light(centre, distance, height, heading_deg, lens=35.0):
    scene = bpy.context.scene
    heading = math.radians(heading_deg)
    cam_data = bpy.data.cameras.new("Camera")
    cam_data.lens = lens
    cam_data.clip_end = max(1000.0, 10 * distance)
    camera = bpy.data.objects.new("Camera", cam_data)
    scene.collection.objects.link(camera)
    camera.location = (centre[0] + distance * math.cos(heading),
                       centre[1] + distance * math.sin(heading), centre[2] + height)
    aim(camera, centre)
    scene.camera = camera
    sun_data = bpy.data.lights.new("Sun", "SUN")
    sun_data.energy = 3.5
    sun_data.angle = math.radians(2.0)
    sun = bpy.data.objects.new("Sun", sun_data)
    scene.collection.objects.link(sun)
    sun.rotation_euler = (math.radians(50.0), 0.0, math.radians(heading_deg - 60.0))
    world = bpy.data.worlds.new("Sky")
    background = node_tree(world).nodes["Background"]
    background.inputs["Color"].default_value = (0.55, 0.65, 0.8, 1.0)
    background.inputs["Strength"].default_value = 0.6
    scene.world = world
    return math.hypot(distance, height)


def ground_material(name: str, dark, light, scale: float = 0.5):
    """Bare ground for a sample terrain: rough, its colour mottled between ``dark`` and
    ``light`` (RGB) by noise of ``scale`` per metre, so scoured ground reads against the
    snow in a render. An existing material of that name is reused."""
    material = bpy.data.materials.get(name)
    if material is not None:
        return material
    material, principled, _ = principled_material(name, (*dark, 1.0))
    if principled is None:
        return material
    nodes, links = material.node_tree.nodes, material.node_tree.links
    principled.inputs["Roughness"].default_value = 0.9
    coordinates = nodes.new("ShaderNodeTexCoord")
    noise = nodes.new("ShaderNodeTexNoise")
    noise.inputs["Scale"].default_value = scale
    noise.inputs["Detail"].default_value = 6.0
    links.new(coordinates.outputs["Object"], noise.inputs["Vector"])
    ramp = nodes.new("ShaderNodeValToRGB")
    ramp.color_ramp.elements[0].position, ramp.color_ramp.elements[1].position = 0.35, 0.65
    ramp.color_ramp.elements[0].color = (*dark, 1.0)
    ramp.color_ramp.elements[1].color = (*light, 1.0)
    links.new(noise.outputs["Fac"], ramp.inputs["Fac"])
    links.new(ramp.outputs["Color"], principled.inputs["Base Color"])
    return material


#: Sample terrains' materials: earth and dry grass on the plains, rock in the mountains,
#: grey concrete for the box test's block and the solid fence (dark, light RGB).
EARTH = ((0.07, 0.05, 0.035), (0.16, 0.13, 0.07))
ROCK = ((0.08, 0.075, 0.07), (0.22, 0.20, 0.18))
CONCRETE = ((0.30, 0.30, 0.29), (0.42, 0.42, 0.40))


def dress_terrain(obj, ground, raised=None, raised_above: float = 0.05) -> None:
    """Give a sample terrain its materials: ``ground`` (a (dark, light) pair) everywhere,
    ``raised`` on the faces with a vertex more than ``raised_above`` metres above the
    ground level (the box test's block, the solid fence)."""
    mesh = obj.data
    mesh.materials.append(ground_material(f"{obj.name} Ground", *ground))
    if raised is None:
        return
    mesh.materials.append(ground_material(f"{obj.name} Block", *raised, scale=2.0))
    heights = np.empty(len(mesh.vertices) * 3, np.float32)
    mesh.vertices.foreach_get("co", heights)
    high = heights.reshape(-1, 3)[:, 2] > raised_above
    corners = np.empty(len(mesh.loops), np.int32)
    mesh.loops.foreach_get("vertex_index", corners)
    starts = np.empty(len(mesh.polygons), np.int32)
    mesh.polygons.foreach_get("loop_start", starts)
    index = np.maximum.reduceat(high[corners].astype(np.int32), starts)
    mesh.polygons.foreach_set("material_index", index.astype(np.int32))


#: Full Density Distance of the camera-only flakes, as a share of the camera's distance to
#: its target: flakes nearer than this are all written, farther ones thin out.
FULL_DENSITY = 0.5


def _render_defaults(scene, camera_distance: float, resolution=(640, 360), samples=16):
    """Cycles on the CPU, the snow render setup and camera-only flakes thinning out beyond
    FULL_DENSITY of ``camera_distance`` (the camera's distance to its target)."""
    from ..operators.render_setup import setup_render

    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = samples
    scene.cycles.use_denoising = False
    scene.render.resolution_x, scene.render.resolution_y = resolution
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "PNG"
    setup_render(scene)                       # motion blur, transparent bounces
    props = scene.snowfall
    props.camera_only = True
    props.camera_margin = 0.1
    props.use_camera_falloff = True
    props.camera_falloff_distance = FULL_DENSITY * camera_distance
    props.use_auto_flake_size = True


def _storm(props, rate: float, wind_speed: float, wind_from: float = 270.0) -> None:
    """A scene's snowfall (a rate, m/h) and wind (m/s, from ``wind_from`` degrees)."""
    props.snowfall_mode = "RATE"
    props.snowfall_rate = rate
    props.wind_speed = wind_speed
    props.wind_from = math.radians(wind_from)


def box_test(frames: int = 96, flakes: int = 100_000, resolution: int = 81):
    """The papers' box test (001, fig. 4.10): a 20 m plane with a 4 x 4 x 2 m block and a
    strong wind (10 m/s) from the west (blowing toward +X). Returns the terrain object."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    vertices, triangles = scenes.box_test(size=20.0, block=4.0, block_height=2.0,
                                          resolution=resolution)
    terrain = mesh_object("Box Test Terrain", vertices, triangles)
    dress_terrain(terrain, EARTH, raised=CONCRETE)
    distance = _camera_and_light((1.0, 0.0, 0.5), 22.0, 12.0, -60.0)
    _render_defaults(scene, distance)
    scene.frame_start, scene.frame_end = 1, frames
    props = scene.snowfall
    props.heightmap_resolution = 128
    props.wind_resolution = 32
    props.sky_height = 6.0
    _storm(props, rate=60.0, wind_speed=10.0)   # time-lapse: about 3 cm in a 2 s bake
    props.gust_strength = 0.2
    props.flake_count = flakes
    props.snow_type = "dry"
    props.substeps = 2
    props.side_walls = True           # the plane's sides run along the wind: no snow lines
    return terrain


def mountain_valley(frames: int = 96, flakes: int = 200_000, resolution: int = 256):
    """A 400 x 300 m valley between two ridges (60 m relief), a 12 m/s storm across the
    valley (from the west, turning to from 250 degrees, west-south-west): crests and
    windward slopes scoured, lee slopes loaded. Returns the terrain object."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    vertices, triangles = scenes.mountain_valley(size_x=400.0, size_y=300.0, relief=60.0,
                                                 resolution=resolution)
    terrain = mesh_object("Valley Terrain", vertices, triangles)
    dress_terrain(terrain, ROCK)
    distance = _camera_and_light((0.0, 0.0, 20.0), 330.0, 140.0, -70.0, lens=32.0)
    _render_defaults(scene, distance)
    scene.frame_start, scene.frame_end = 1, frames
    props = scene.snowfall
    props.heightmap_resolution = 256
    props.wind_resolution = 64
    props.sky_height = 40.0           # flakes reach the ground within the bake
    # across the valley (from the west): over one ridge into the other's lee; time-lapse
    _storm(props, rate=50.0, wind_speed=12.0)
    props.flake_count = flakes
    props.snow_type = "dry"
    props.substeps = 2
    # The wind turns slowly across the bake: keyframed direction, sampled per frame.
    props.keyframe_insert("wind_from", frame=1)
    props.wind_from = math.radians(250.0)
    props.keyframe_insert("wind_from", frame=frames)
    props.wind_from = math.radians(270.0)
    return terrain


def _drift_storm(scene, flakes: int):
    """The drift validation scenes' storm (as benchmarks/drift_validation.py): 10 m/s from
    the west (along +X) with light gusts, dry snow at a 120 m/h time-lapse. Returns the
    scene's settings."""
    props = scene.snowfall
    # time-lapse: about 7 cm on open ground in 48 frames
    _storm(props, rate=120.0, wind_speed=10.0)
    props.gust_strength = 0.2
    props.gust_direction_jitter = math.radians(5.0)
    props.flake_count = flakes
    props.snow_type = "dry"
    props.substeps = 2
    return props


#: The fence scenes' layout: a fence 2 m high and 20 m long across a 60 x 30 m plane,
#: centred on a 0.5 m wind cell's centre (x = -9.75 on this plane) as the validation fence
#: (benchmarks/drift_validation.py).
_FENCE_LAYOUT = dict(size_x=60.0, size_y=30.0, fence_height=2.0, fence_length=20.0,
                     fence_x=-9.75)
#: The collection the porous_fence scene's fence lives in (its Porous Fences setting).
FENCE_COLLECTION = "Porous Fences"


def _fence_storm(frames: int, flakes: int):
    """Camera, sun, render and Snowfall settings of the fence scenes: the validation storm
    on 0.25 m heightmap nodes and 0.5 m wind cells (4 up the fence). Returns the settings."""
    scene = bpy.context.scene
    distance = _camera_and_light((-4.0, 0.0, 0.0), 24.0, 9.0, -35.0, lens=30.0)
    _render_defaults(scene, distance)
    scene.frame_start, scene.frame_end = 1, frames
    props = _drift_storm(scene, flakes)
    props.heightmap_resolution = 241      # 0.25 m
    props.wind_cell_size = 0.5            # 4 cells up the fence
    props.sky_height = 8.0
    props.side_walls = True           # the plane's sides run along the wind: no snow lines
    return props


def snow_fence(frames: int = 96, flakes: int = 150_000, resolution: int = 241):
    """A solid snow fence (2 m high, 20 m long, 0.6 m thick) across a 60 x 30 m plane, wind
    10 m/s along +X: a short, deep drift at its windward foot and a broad, shallower one
    in its lee (docs/drift_validation.md compares the pattern with Tabler's fences). Returns the
    terrain object."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    vertices, triangles = scenes.snow_fence(thickness=0.6, resolution=resolution,
                                            **_FENCE_LAYOUT)
    terrain = mesh_object("Snow Fence Terrain", vertices, triangles)
    dress_terrain(terrain, EARTH, raised=CONCRETE)
    _fence_storm(frames, flakes)
    return terrain


def _fence_material(porosity: float = 0.5):
    """Weathered wood boards with open gaps between them for the porous fence's plane: a
    horizontal saw wave in object space (0.31 m from board to board), the share
    ``porosity`` of it transparent, so the render shows a slatted fence."""
    material, principled, output = principled_material("Snow Fence Slats",
                                                       (0.23, 0.14, 0.08, 1.0))
    if principled is None or output is None:
        return material
    nodes, links = material.node_tree.nodes, material.node_tree.links
    principled.inputs["Roughness"].default_value = 0.8
    coordinates = nodes.new("ShaderNodeTexCoord")
    wave = nodes.new("ShaderNodeTexWave")
    wave.wave_type, wave.bands_direction, wave.wave_profile = "BANDS", "Z", "SAW"
    wave.inputs["Scale"].default_value = 1.0
    links.new(coordinates.outputs["Object"], wave.inputs["Vector"])
    gap = nodes.new("ShaderNodeMath")
    gap.operation = "LESS_THAN"
    gap.inputs[1].default_value = porosity
    links.new(wave.outputs["Fac"], gap.inputs[0])
    transparent_where(material, principled, output, gap.outputs["Value"], transparent_at=1)
    return material


def porous_fence(frames: int = 96, flakes: int = 150_000, resolution: int = 241):
    """The snow_fence scene with a half-open (porosity 0.5) slatted fence instead of the
    solid one: a vertical plane (no thickness) of its own in the collection "Porous Fences",
    the scene's Porous Fences setting. The wind passes through it, slowed; flakes and
    drifting snow pass through it too. Returns the terrain object (the ground)."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    (vertices, triangles), (fence_vertices, fence_triangles) = scenes.porous_fence(
        resolution=resolution, **_FENCE_LAYOUT)
    terrain = mesh_object("Porous Fence Ground", vertices, triangles)
    dress_terrain(terrain, EARTH)
    fences = bpy.data.collections.new(FENCE_COLLECTION)
    scene.collection.children.link(fences)
    fence = mesh_object("Porous Fence", fence_vertices, fence_triangles, collection=fences)
    props = _fence_storm(frames, flakes)
    props.fence_collection = fences
    props.fence_porosity = 0.5
    fence.data.materials.append(_fence_material(props.fence_porosity))
    return terrain


def ridge(frames: int = 96, flakes: int = 200_000, resolution: int = 241):
    """A smooth 2D ridge (20 m high, half-width 30 m) across a 240 x 120 m plane, wind
    10 m/s along +X over it: windward slope and crest exposed, the lee slope sheltered
    (docs/drift_validation.md). Returns the terrain object."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    vertices, triangles = scenes.ridge(size_x=240.0, size_y=120.0, height=20.0,
                                       half_width=30.0, resolution=resolution)
    terrain = mesh_object("Ridge Terrain", vertices, triangles)
    dress_terrain(terrain, ROCK)
    distance = _camera_and_light((10.0, 0.0, 6.0), 160.0, 60.0, -50.0, lens=32.0)
    _render_defaults(scene, distance)
    scene.frame_start, scene.frame_end = 1, frames
    props = _drift_storm(scene, flakes)
    props.heightmap_resolution = 241      # 1 m
    props.wind_cell_size = 2.5            # 8 cells up the ridge
    props.sky_height = 30.0
    return terrain


SCENES = {"box_test": box_test, "mountain_valley": mountain_valley, "snow_fence": snow_fence,
          "porous_fence": porous_fence, "ridge": ridge}


def build(name: str, **options):
    """Build sample scene ``name`` (see ``SCENES``) in a fresh file with the add-on
    registered, and set its terrain. Returns the terrain object."""
    from ..operators.set_terrain import set_terrain

    if not hasattr(bpy.types.Scene, "snowfall"):
        from .. import register
        register()
    terrain = SCENES[name](**options)
    set_terrain(bpy.context, [terrain])
    return terrain


def main(name: str, argv=None) -> int:
    import argparse
    import os

    parser = argparse.ArgumentParser(prog=f"python -m snowfall.sample_scenes.{name}",
                                     description=f"Build the {name} sample scene as a .blend.")
    parser.add_argument("output", help="where to save the .blend")
    parser.add_argument("--frames", type=int, default=96)
    parser.add_argument("--flakes", type=int)
    args = parser.parse_args(argv)
    options = {"frames": args.frames}
    if args.flakes:
        options["flakes"] = args.flakes
    build(name, **options)
    bpy.ops.wm.save_mainfile(filepath=os.path.abspath(args.output))
    print(f"saved {os.path.abspath(args.output)}")
    return 0
