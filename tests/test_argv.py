"""argv builders for nsys/ncu, name escaping, and locating the tools."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsight_magic.errors import ToolNotFoundError, ToolVersionError
from nsight_magic.processes import locate as tools
from nsight_magic.profilers import ncu as ncu_argv
from nsight_magic.profilers import nsys as nsys_argv

KERNEL_NAMES = [
    "operator()",
    "void f<(int)4>(float *)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char *, 3>>(int, T2, T3)",
    "k[0]+*?.|^$\\",
    "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_coopA_TNT",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4",
    'kernel\'s "quoted" name',
    "ядро_µ_核",
    "a{2}b",
]


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_exact_kernel_regex_matches_only_the_name(name: str) -> None:
    rx = ncu_argv.exact_kernel_regex(name)
    assert rx.startswith("^") and rx.endswith("$")
    assert re.fullmatch(rx, name)
    for near in (name + "x", "x" + name, name[:-1], name + " ", name.upper() + "_"):
        if near != name:
            assert not re.fullmatch(rx, near), near
    if "." in name:
        assert not re.fullmatch(rx, name.replace(".", "x"))


@given(st.text(min_size=1, max_size=40))
def test_exact_kernel_regex_roundtrip_any_text(name: str) -> None:
    rx = ncu_argv.exact_kernel_regex(name)
    assert re.fullmatch(rx, name, flags=re.DOTALL)
    assert not re.fullmatch(rx, name + "a")


def test_kernel_name_base_fits_the_name() -> None:
    assert ncu_argv.kernel_name_base("void f<(int)4>(float *)") == "demangled"
    assert ncu_argv.kernel_name_base("operator()") == "demangled"
    assert ncu_argv.kernel_name_base("_Z6kernelPf") == "mangled"
    assert ncu_argv.kernel_name_base("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_coopA_TNT") == "function"
    args = ncu_argv.kernel_filter_args("void f<(int)4>(float *)")
    assert args == [
        "--kernel-name-base",
        "demangled",
        "--kernel-name",
        r"regex:^void f<\(int\)4>\(float \*\)$",
    ]


@pytest.mark.parametrize(
    ("ranges", "domain", "expected"),
    [
        ("cell", "nsight_magic", "nsight_magic@cell/"),
        ("LLM@prefill", None, r"LLM\@prefill/"),
        ("a/b", None, r"a\/b/"),
        (["decode", "decode/step"], None, r"decode/decode\/step/"),
        ("back\\slash", "my@dom", r"my\@dom@back\\slash/"),
        ('say "hi" ünï', None, 'say "hi" ünï/'),
    ],
)
def test_nvtx_filter_escaping(ranges: str | list[str], domain: str | None, expected: str) -> None:
    text = ncu_argv.nvtx_filter(ranges, domain=domain)
    assert text == expected
    parsed_domain, parsed_ranges, push_pop = ncu_argv.parse_nvtx_filter(text)
    assert parsed_domain == domain and push_pop
    assert parsed_ranges == ([ranges] if isinstance(ranges, str) else ranges)


def test_nvtx_start_end_range_has_no_trailing_slash() -> None:
    assert ncu_argv.nvtx_filter("side-work", push_pop=False) == "side-work"
    assert ncu_argv.parse_nvtx_filter("side-work") == (None, ["side-work"], False)
    with pytest.raises(ValueError):
        ncu_argv.nvtx_filter("")


@given(st.text(min_size=1, max_size=20), st.one_of(st.none(), st.text(min_size=1, max_size=10)))
def test_nvtx_filter_roundtrip_any_text(name: str, domain: str | None) -> None:
    domain_out, ranges, push_pop = ncu_argv.parse_nvtx_filter(
        ncu_argv.nvtx_filter(name, domain=domain)
    )
    assert (domain_out, ranges, push_pop) == (domain, [name], True)


def test_ncu_argv_default_gates_on_the_cell_range() -> None:
    argv = ncu_argv.profile_argv("/x/ncu", "/r/report", ["/py", "/r/script.py"])
    assert argv == [
        "/x/ncu", "--target-processes", "all", "--nvtx", "--set", "roofline",
        "--nvtx-include", "nsight_magic@capture", "-f", "-o", "/r/report", "/py", "/r/script.py",
    ]  # fmt: skip


def test_ncu_argv_all_options() -> None:
    options = ncu_argv.NcuOptions(
        set=None, sections=("SpeedOfLight", "Occupancy"),
        metrics=("gpu__time_duration.sum", "dram__bytes.sum"), kernel_exact="operator()",
        launch_skip=2, launch_count=1, nvtx_include=(ncu_argv.nvtx_filter("LLM@prefill"),),
        extra_args=("--cache-control", "none"),
    )  # fmt: skip
    argv = ncu_argv.profile_argv("ncu", "rep", ["py", "s.py", "status.json"], options=options)
    assert "--set" not in argv
    assert argv[argv.index("--nvtx-include") + 1] == r"LLM\@prefill/"
    assert argv.count("--section") == 2
    assert argv[argv.index("--metrics") + 1] == "gpu__time_duration.sum,dram__bytes.sum"
    assert argv[argv.index("--kernel-name") + 1] == r"regex:^operator\(\)$"
    assert argv[argv.index("--launch-skip") + 1] == "2"
    assert argv[argv.index("--launch-count") + 1] == "1"
    assert argv[-5:] == ["--cache-control", "none", "py", "s.py", "status.json"]
    with pytest.raises(ValueError):
        ncu_argv.NcuOptions(kernel_regex="a", kernel_exact="a")
    with pytest.raises(ValueError):
        ncu_argv.NcuOptions(launch_skip=-1)


def test_nsys_argv_shape() -> None:
    options = nsys_argv.NsysOptions(trace=("cuda", "nvtx", "osrt"),
                                    extra_args=("--cuda-memory-usage=true",))  # fmt: skip
    argv = nsys_argv.profile_argv("/n/nsys", "/r/report", ["/py", "/r/script.py", "/r/status.json"],
                                  options=options)  # fmt: skip
    assert argv == [
        "/n/nsys", "profile", "--trace=cuda,nvtx,osrt", "--cuda-graph-trace=node",
        "--sample=none", "--cpuctxsw=none",
        "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
        "--force-overwrite=true", "-o", "/r/report", "--cuda-memory-usage=true",
        "/py", "/r/script.py", "/r/status.json",
    ]  # fmt: skip
    ops = nsys_argv.NsysOptions(cuda_graph_trace="graph", pytorch="autograd-shapes-nvtx")
    assert ops.collect_args() == ["--trace=cuda,nvtx", "--cuda-graph-trace=graph",
                                  "--pytorch=autograd-shapes-nvtx"]  # fmt: skip
    assert nsys_argv.NSYS_ENV == {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    with pytest.raises(ValueError, match="cudda"):
        nsys_argv.parse_trace("cudda,nvtx")


# --- tools ---------------------------------------------------------------------------------
def _exe(path: Path) -> Path:
    """An executable file at ``path``; never run, only found (path search is under test)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_missing_tool_message_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("NSIGHT_MAGIC_NSYS", raising=False)
    with pytest.raises(ToolNotFoundError) as info:
        tools.find_tool("nsys", globs=[])
    msg = str(info.value)
    assert "Nsight Systems" in msg and '%config NsightMagic.nsys_path = "' in msg
    assert "NSIGHT_MAGIC_NSYS" in msg


def test_configured_path_wins_and_bad_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = _exe(tmp_path / "nc" / "ncu")
    assert tools.find_tool("ncu", str(ncu)) == str(ncu)
    assert tools.find_tool("ncu", str(tmp_path / "nc")) == str(ncu)  # a folder works too
    with pytest.raises(ToolNotFoundError, match="from configured"):
        tools.find_tool("ncu", str(tmp_path / "nope" / "ncu"))
    monkeypatch.setenv("NSIGHT_MAGIC_NCU", str(ncu))
    assert tools.find_tool("ncu") == str(ncu)


def test_install_dirs_newest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("NSIGHT_MAGIC_NSYS", raising=False)
    old = _exe(tmp_path / "nsight-compute" / "2024.1.0" / "host" / "target-linux-x64" / "nsys")
    new = _exe(tmp_path / "nsight-compute" / "2025.3.1" / "host" / "target-linux-x64" / "nsys")
    pattern = str(tmp_path / "nsight-compute" / "*" / "host" / "target-linux-x64" / "nsys")
    assert tools.candidates("nsys", [pattern]) == [str(new), str(old)]
    assert tools.find_tool("nsys", globs=[pattern]) == str(new)
    os.chmod(new, 0o644)  # not executable: skipped
    assert tools.find_tool("nsys", globs=[pattern]) == str(old)


def test_parse_and_check_versions() -> None:
    # the exact strings the 2025.3.1 tools print (tests/data/capture_versions.txt)
    assert tools.parse_version("NVIDIA Nsight Systems version 2025.3.1.0") == (2025, 3, 1, 0)
    ncu_text = (
        "NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA "
        "Corporation\nVersion 2025.3.1.0 (build 36398880) (public-release)"
    )
    assert tools.parse_version(ncu_text) == (2025, 3, 1, 0)
    assert tools.parse_version("no digits here") is None
    tools.check_version("nsys", (2025, 3, 1, 0))
    with pytest.raises(ToolVersionError, match="older than"):
        tools.check_version("ncu", (2022, 4, 1))


def test_no_nvidia_smi_means_no_gpu_info(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert tools.gpu_info() == []


def test_nvidia_smi_is_asked_once_its_answer_came(monkeypatch: pytest.MonkeyPatch) -> None:
    """What nvidia-smi tells (names, driver, memory, max clock) is kept for the process: each
    run asked again (0.05-0.08 s of every sweep configuration). A failed answer is not kept."""
    import subprocess

    answers = [subprocess.CompletedProcess([], 9, "", "NVIDIA-SMI has failed"),
               subprocess.CompletedProcess([], 0, "NVIDIA H100 80GB HBM3, 580.159.04, "
                                           "81559 MiB, 1980 MHz, GPU-1\n", "")]  # fmt: skip
    asked: list[list[str]] = []

    def run(argv: list[str], timeout: float, env: object = None) -> object:
        asked.append(argv)
        return answers[min(len(asked), len(answers)) - 1]

    monkeypatch.setattr(tools, "_gpu_info", {})
    monkeypatch.setattr(tools, "find_nvidia_smi", lambda: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(tools, "run_bounded", run)
    assert tools.gpu_info() == []  # failed: asked again next time
    first = tools.gpu_info()
    assert first[0]["name"] == "NVIDIA H100 80GB HBM3" and len(asked) == 2
    first[0]["name"] = "changed by a caller"
    assert tools.gpu_info()[0]["name"] == "NVIDIA H100 80GB HBM3" and len(asked) == 2


def test_warm_session_argv() -> None:
    options = nsys_argv.NsysOptions(pytorch="autograd-nvtx")
    launch = nsys_argv.launch_argv("/n/nsys", "S1", ["/py", "-m", "w"], options)
    assert launch == [
        "/n/nsys", "launch", "--session=S1", "--trace=cuda,nvtx", "--cuda-graph-trace=node",
        "--pytorch=autograd-nvtx", "/py", "-m", "w",
    ]  # fmt: skip
    start = nsys_argv.start_argv("/n/nsys", "S1", "/r/report")
    # collection begins at the worker's cudaProfilerStart and ends, report written, at Stop
    assert "--capture-range=cudaProfilerApi" in start and "--capture-range-end=stop" in start
    assert start[:3] == ["/n/nsys", "start", "--session=S1"] and start[-2:] == ["-o", "/r/report"]
    assert nsys_argv.session_argv("nsys", "cancel", "S1") == ["nsys", "cancel", "--session=S1"]
    with pytest.raises(ValueError):
        nsys_argv.session_argv("nsys", "rm -rf", "S1")
    ncu_launch = ncu_argv.launch_argv("/x/ncu", 30016, ["/py", "-m", "w"])
    assert ncu_launch[:6] == ["/x/ncu", "--mode", "launch", "--port", "30016", "--target-processes"]
    assert ncu_launch[6] == "application-only"  # what a cell starts runs without ncu's injection
    opts = ncu_argv.NcuOptions(kernel_exact="k<1>", launch_skip=1, launch_count=1)
    attach = ncu_argv.attach_argv("/x/ncu", 30016, "/r/report", opts)
    assert attach[:7] == [
        "/x/ncu",
        "--mode",
        "attach",
        "--hostname",
        "127.0.0.1",
        "--port",
        "30016",
    ]
    assert "--nvtx" not in attach  # attach refuses it: it goes on the launching command
    assert attach[attach.index("--nvtx-include") + 1] == "nsight_magic@capture"
    assert attach[attach.index("--kernel-name") + 1] == r"regex:^k<1>$"
    assert ncu_argv.RELEASE.filter_args() == ["--kernel-name", "regex:^$"]


def test_range_specs_as_the_nvtx_tab_writes_them() -> None:
    assert ncu_argv.parse_range_spec("LLM:LLM@prefill") == ("LLM", "LLM@prefill")
    assert ncu_argv.parse_range_spec(":decode") == ("", "decode")
    assert ncu_argv.parse_range_spec("decode") == (None, "decode")
    assert ncu_argv.parse_range_spec("L3: y = f(x)") == ("nsight_magic", "L3: y = f(x)")
    with pytest.raises(ValueError):
        ncu_argv.parse_range_spec("LLM:")


def test_ncu_lists_are_read_from_ncus_own_output(data_dir) -> None:
    """``ncu --list-sets`` / ``--list-sections`` of ncu 2025.3.1 (tests/data/ncu_lists)."""
    sets = ncu_argv.listed_identifiers((data_dir / "ncu_lists" / "sets.txt").read_text())
    assert sets == {"basic", "detailed", "full", "nvlink", "pmsampling", "roofline"}
    sections = ncu_argv.listed_identifiers((data_dir / "ncu_lists" / "sections.txt").read_text())
    assert {"SpeedOfLight", "LaunchStats", "SpeedOfLight_RooflineChart"} <= sections
    assert not any(" " in s for s in sections)


def test_profiler_commands_get_no_injection_variables() -> None:
    from nsight_magic.processes.clean_env import clean_env

    base = {"LD_PRELOAD": "x.so", "NSYS_X": "1", "QUADD_Y": "1", "CUDA_INJECTION64_PATH": "i",
            "NVTX_INJECTION64_PATH": "n", "PATH": "/bin", "HOME": "/h"}  # fmt: skip
    env = clean_env({"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}, base=base)
    assert env == {"PATH": "/bin", "HOME": "/h", "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
