"""The bake's flake file formats, pure Python and NumPy (no bpy), written on the bake's
writer thread and read back by the add-on, the farm and the tests:

- ``ptcache``: Blender's particle point cache (.bphys), uncompressed, LZMA and Zstd
  (docs/particles.md).
- ``gn_bake``: a Geometry Nodes bake on disk (Blender 4.2-4.5's flakes).
- ``frame_store``: the writer thread's side of a bake's frames: ``FlakeCopier`` (the bake
  thread's copy of a frame's flakes) and ``FrameStore`` (which writes them in either form
  on a ``bake_cache.BakeWriter``).
"""
