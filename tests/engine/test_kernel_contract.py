"""The kernel contract (kernels/contract.py): every build provides every stage's members
with the contract's parameters, the shared constants have one home, the CUDA sources get
them from it, and the engine reaches the builds only through its Backend."""
import ast
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from snowfall.kernels import contract
from snowfall.snow_addon import backend as backend_module

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = tuple(backend_module.BUILDS)        # numpy, cpu, gpu: each one build


def _members(protocol):
    """(functions, attributes) the Protocol declares."""
    functions = {name: value for name, value in vars(protocol).items()
                 if callable(value) and not name.startswith("_")}
    attributes = [name for name in getattr(protocol, "__annotations__", {})
                  if not name.startswith("_")]
    return functions, attributes


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("stage", sorted(contract.STAGES))
def test_every_build_provides_every_member_with_the_contract_parameters(backend_name, stage):
    module = backend_module.build_module(backend_name, stage)
    functions, attributes = _members(contract.STAGES[stage])
    assert functions, stage
    for name in attributes:
        assert hasattr(module, name), f"{module.__name__} lacks {name}"
    for name, declared in functions.items():
        provided = getattr(module, name, None)
        assert callable(provided), f"{module.__name__} lacks {name}()"
        wanted = list(inspect.signature(declared).parameters.values())[1:]    # less self
        got = list(inspect.signature(provided).parameters.values())
        where = f"{module.__name__}.{name}"
        assert [p.name for p in got[:len(wanted)]] == [p.name for p in wanted], where
        for want, have in zip(wanted, got):
            assert (want.default is inspect.Parameter.empty) == \
                (have.default is inspect.Parameter.empty), f"{where}: {want.name}'s default"
            if want.default is not inspect.Parameter.empty:
                assert have.default == want.default, f"{where}: {want.name}'s default"
        for extra in got[len(wanted):]:       # a build's own knobs: optional only
            assert extra.default is not inspect.Parameter.empty, f"{where}: {extra.name}"


def test_every_numba_kernel_runs_without_the_gil():
    # a bake steps on its own thread beside Blender's (docs/responsive_bake.md): a kernel
    # that kept the GIL would hold Blender's thread for as long as it runs (the open
    # snowfield's grain flights, as NumPy on that thread, held it for up to 1.4 s)
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import snowfall.kernels.cpu as cpu_build

    kernels = []
    for info in pkgutil.iter_modules(cpu_build.__path__):
        module = importlib.import_module(f"{cpu_build.__name__}.{info.name}")
        kernels += [(f"{module.__name__}.{name}", value) for name, value in vars(module).items()
                    if isinstance(value, CPUDispatcher) and value.__module__ == module.__name__
                    and value.targetoptions.get("inline", "never") != "always"]
    assert len(kernels) > 40
    assert "snowfall.kernels.cpu.flakes._grain_flights" in dict(kernels)
    assert [name for name, kernel in kernels if not kernel.targetoptions.get("nogil")] == []


def test_an_unknown_stage_or_build_is_refused_by_name():
    with pytest.raises(ValueError, match="no kernel stage 'weather'"):
        backend_module.build_module("cpu", "weather")
    with pytest.raises(ValueError, match="no kernel build"):
        backend_module.build_module("tpu", "wind")
    with pytest.raises(ValueError, match="no host helper"):
        backend_module.host_kernels("wind")


def _shared_constants():
    return {name: value for name, value in vars(contract).items()
            if re.fullmatch(r"[A-Z][A-Z0-9_]+", name) and not isinstance(value, dict)
            and name not in ("F32",)}


def test_no_build_keeps_its_own_copy_of_a_shared_constant():
    """A build module's name for a shared constant is the contract's object itself."""
    shared = _shared_constants()
    for folder in ("reference", "cpu", "gpu"):
        for path in sorted((ROOT / "kernels" / folder).glob("*.py")):
            tree = ast.parse(path.read_text())
            for node in tree.body:
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        names = [t.id for t in ast.walk(target) if isinstance(t, ast.Name)]
                        copied = sorted(set(names) & set(shared))
                        assert not copied, f"{path.relative_to(ROOT)} defines {copied} again"


def test_cuda_literals_are_exact():
    for value in (contract.OPEN_LIMIT, contract.SPAWN_MARGIN, contract.TWO_PI,
                  contract.FRACTION_MIN, contract.NO_SURFACE, contract.GRID_STEP_FROM,
                  contract.COEFFICIENT_STEP):
        literal = contract.c_literal(value)
        assert literal.endswith("f")
        assert np.float32(float.fromhex(literal[:-1])) == value
    assert contract.c_literal(contract.BLOWING) == "0x80000000u"
    assert contract.c_literal(np.uint32(contract.STREAM_REENTRY)) == "0xdu"
    assert contract.c_literal(contract.WAKE_SAMPLES) == "7"
    with pytest.raises(TypeError):
        contract.c_literal("7")


def _cuda_sources():
    from snowfall.kernels.gpu import cover, drift, flakes, pressure, wind

    return {"flakes": flakes.kernel_source(256), "wind": wind.SOURCE, "drift": drift.SOURCE,
            "cover": cover.SOURCE, "pressure": pressure.SOURCE}


def test_cuda_sources_define_the_shared_constants_from_the_contract():
    """Every #define of a contract constant in the CUDA sources is the contract's value,
    written once by cuda_defines, and the flakes' random streams are named, not numbered."""
    shared = _shared_constants()
    for name, source in _cuda_sources().items():
        defined = re.findall(r"^#define (\w+) (.+)$", source, flags=re.M)
        names = [n for n, _ in defined]
        for define, literal in defined:
            if define in shared:
                value = shared[define]
                assert float(np.float32(float.fromhex(literal[:-1]))
                             if literal.endswith("f") else int(literal.rstrip("uL"), 0)) \
                    == float(value), f"{name}: #define {define} {literal}"
        assert len(names) == len(set(names)), f"{name} defines a name twice"
    flakes_source = _cuda_sources()["flakes"]
    assert not re.search(r"random_uniform\(seed, fid, [^,()]+, \d+u\)", flakes_source)
    for stream in ("STREAM_X", "STREAM_LIFT", "STREAM_REENTRY"):
        assert f"#define {stream} " in flakes_source


def test_the_engine_imports_no_kernel_build():
    """snow_addon reaches kernels only through kernels.contract and its Backend."""
    offenders = []
    for path in sorted((ROOT / "snow_addon").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.ImportFrom):
                modules = [("." * node.level) + (node.module or "")]
                modules += [f"{modules[0]}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            for module in modules:
                if re.search(r"kernels\.(reference|cpu|gpu)\b", module):
                    offenders.append(f"{path.relative_to(ROOT)}: {module}")
    assert not offenders, offenders


def test_the_flake_records_unpack_to_the_flat_defaults():
    """Without blowing snow and with the wrap-around the records add no keywords: the
    builds' bodies run with their defaults, as before the records."""
    arrays = [np.zeros(2, np.float32) for _ in range(9)]
    state = contract.FlakeState(*arrays)
    wind = contract.WindField(*arrays[:3], 0.0, 0.0, 0.0, 1.0)
    ground = contract.Ground(*arrays[:2], 0.0, 0.0, 0.5)
    law = contract.FlakeLaw(3, 1.0, 2.0, 0.5, 9.81)
    positional, keywords = contract.flat_step_arguments(state, wind, ground, law, 0.1, "hits")
    assert keywords == {}
    assert positional[21:] == ("hits", 3, 1.0, 2.0, 0.5, 9.81, 0.1)
    inflow = contract.Inflow(contract.OPEN_SNOWFIELD, 6.0, 0.0, 5.0)
    blowing = contract.BlowingSnow(arrays[0], arrays[1], step_index=7)
    _, keywords = contract.flat_step_arguments(state, wind, ground, law, 0.1, "hits", blowing,
                                               inflow, "grains")
    assert keywords["inflow_mode"] == contract.OPEN_SNOWFIELD and keywords["margin"] == 5.0
    assert keywords["step_index"] == 7 and keywords["grain_count"] == "grains"
    with pytest.raises(Exception):
        state.pos_x = arrays[0]       # frozen
