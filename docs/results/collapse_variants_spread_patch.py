"""Patch the device copy's GPU flakes kernel: a weighted grain's 2^k units spread one per node
over a 2^ceil(k/2) x 2^floor(k/2) block around its landing node (clamped to the grid)."""
p = "kernels/gpu/flakes.py"
s = open(p).read()
a = "    if (hit && !outside) atomicAdd(hit_counts + (long long)nj * hnx + ni, weight);\n"
b = """    if (hit && !outside) {
        if (weight_exponent == 0u) atomicAdd(hit_counts + (long long)nj * hnx + ni, 1);
        else {
            int side_x = 1 << ((weight_exponent + 1u) / 2u), side_y = 1 << (weight_exponent / 2u);
            for (int dj = 0; dj < side_y; ++dj) {
                int jj = min(max(nj - side_y / 2 + dj, 0), hny - 1);
                for (int di = 0; di < side_x; ++di) {
                    int ii = min(max(ni - side_x / 2 + di, 0), hnx - 1);
                    atomicAdd(hit_counts + (long long)jj * hnx + ii, 1);
                }
            }
        }
    }
"""
assert s.count(a) == 1
open(p, "w").write(s.replace(a, b))
print("patched")
