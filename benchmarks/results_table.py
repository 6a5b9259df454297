"""Turn `snowfall benchmark --out results.json` files into the markdown table used in
docs/benchmarks.md: ``python benchmarks/results_table.py a.json [b.json ...]``."""
import json
import sys


def rows(path):
    data = json.load(open(path))
    for scene in data["scenes"]:
        if "steps_per_s" not in scene:
            yield f"| {scene['scene']} | {scene.get('error', 'not run')} |" + " |" * 8
            continue
        stages = scene["stages"]

        def stage(name):
            s = stages.get(name)
            if not s:
                return "-"
            return f"{s['ms_per_step']:.3f} ms ({100 * s['copy_fraction']:.0f}%)"

        wind = scene["last_wind"]
        nx, ny, nz = scene["wind_cells"]
        ratio = scene.get("wind_over_25_jacobi")
        yield (f"| {scene['scene']} | {nx}x{ny}x{nz} | {scene['flakes']:,} | "
               f"{scene['heightmap'][0]}^2 | **{scene['steps_per_s']:.0f}** | {stage('wind')} | "
               f"{wind['iterations']} | {stage('flakes')} | {stage('cover')} | "
               f"{scene['flake_bytes_per_flake']:.0f} |")


def main(paths):
    data = json.load(open(paths[0]))
    print(f"Device: {data['device']}; copy {data['copy_bytes_per_s'] / 1e9:.0f} GB/s "
          f"(read + written); {data['steps']} timed steps after {data['warmup']} warm-up.\n")
    print("| scene | wind cells | flakes | heightmap | steps/s | wind step (% of copy) | "
          "CG iterations | flakes (% of copy) | cover (% of copy) | B per flake held |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in paths:
        for row in rows(path):
            print(row)


if __name__ == "__main__":
    main(sys.argv[1:])
