"""tools/run_tests.py: which arguments keep `make test` to one pytest process, and the split's verdict."""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def load_runner():
    spec = importlib.util.spec_from_file_location("run_tests", ROOT / "tools" / "run_tests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


runner = load_runner()


@pytest.mark.parametrize("args", [[], ["-q", "--durations=40"], ["-q", "-rA", "-x"], ["-p", "no:cacheprovider"],
                                  ["-pno:randomly"], ["-W", "error"], ["--maxfail=2", "-vv"]])
def test_arguments_that_choose_no_tests_run_the_two_halves(args):
    assert not runner.selects_tests(args)


@pytest.mark.parametrize("args", [["-m", "engine"], ["-q", "-m", "unit"], ["-mengine"], ["-k", "crossover"],
                                  ["-vm", "unit"], ["-qk", "crossover"], ["--lf"], ["--sw"], ["--pdb"],
                                  ["--basetemp=/tmp/x"], ["--junitxml", "report.xml"],
                                  ["tests/unit"], ["tests/engine/test_models.py::test_two_runs_write_identical_files"]])
def test_arguments_that_choose_tests_run_one_process_as_given(args):
    assert runner.selects_tests(args)


MARKERS = ("unit", "integration", "e2e", "engine", "measures_speed")


@pytest.mark.parametrize("marks", [set(c) for n in range(len(MARKERS) + 1)
                                   for c in itertools.combinations(MARKERS, n)])
def test_the_processes_cover_every_test_once(marks):
    # whatever a test is marked with, exactly one of the processes selects it: none runs twice or never
    chosen = dict(zip(("unit", "engine", "integration", "e2e", "timed"),
                      (Expression.compile(expression).evaluate(lambda name, **_: name in marks)
                       for expression in (runner.UNIT, runner.ENGINE, runner.INTEGRATION, runner.E2E, runner.TIMED)),
                      strict=True))
    assert list(chosen.values()).count(True) == 1, (marks, chosen)
    assert chosen["timed"] == ("measures_speed" in marks)  # timed ones alone, whatever else they are
    assert chosen["engine"] == (marks & {"engine", "measures_speed"} == {"engine"})
    # the unit phase starts no control plane: nothing marked integration, e2e or engine runs there
    assert not chosen["unit"] or not marks & {"integration", "e2e", "engine", "measures_speed"}


def test_the_processes_get_the_arguments_and_the_engine_ones_report_each_test(tmp_path):
    unit_phase, side_by_side, alone = runner.phases(["-q", "--durations=40"], tmp_path)
    assert set(unit_phase) == {"unit"} and set(side_by_side) == {"engine", "integration", "e2e"}
    assert set(alone) == {"timed"}
    unit, _ = unit_phase["unit"]
    engine, _ = side_by_side["engine"]
    timed, timed_env = alone["timed"]
    assert unit[-4:] == ["-m", runner.UNIT, "-q", "--durations=40"] and "nice" not in unit
    assert timed[-5:] == ["-m", runner.TIMED, "-v", "-q", "--durations=40"] and "nice" not in timed
    # -v after the marker and before the caller's -q: verbosity adds up (a line per module under -q)
    assert engine[-5:] == ["-m", runner.ENGINE, "-v", "-q", "--durations=40"] and "nice" not in engine
    for name, marks in (("integration", runner.INTEGRATION), ("e2e", runner.E2E)):
        command, _ = side_by_side[name]
        assert command[:3] == ["nice", "-n", str(runner.WAITING_NICENESS)]
        assert command[-4:] == ["-m", marks, "-q", "--durations=40"]
    # each process keeps its local clusters apart from the others' and from any other checkout's
    states = {suite[name][1]["XDG_STATE_HOME"] for suite in (unit_phase, side_by_side, alone) for name in suite}
    assert states == {str(tmp_path / name) for name in ("unit", "engine", "integration", "e2e", "timed")}
    assert timed_env["XDG_STATE_HOME"] != os.environ.get("XDG_STATE_HOME")


def test_pytest_adds_no_path_of_its_own():
    # pyproject's testpaths apply when the arguments name none; a path given narrows the run to it
    assert runner.pytest("tests/unit")[-1:] == ["tests/unit"] and "tests" not in runner.pytest("-q")


def test_any_process_failing_fails_the_run_and_the_later_phases_still_run(tmp_path, monkeypatch, capsys):
    # real child processes stand in for the pytest runs, in the order the phases start them: the unit one
    # passes, then the engine one passes and the integration one fails beside the e2e one, then the timed one
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    outcomes = iter(["print('zero'); raise SystemExit(0)", "print('one'); raise SystemExit(0)",
                     "print('two'); raise SystemExit(3)", "print('two and a half'); raise SystemExit(0)",
                     "print('three'); raise SystemExit(0)"])
    monkeypatch.setattr(runner, "pytest", lambda *args: [sys.executable, "-c", next(outcomes)])
    assert runner.run_in_phases([]) == 3  # the failing process's own exit code
    out = capsys.readouterr().out
    assert "[unit       ] zero" in out and "[engine     ] one" in out and "[integration] two" in out
    assert "[e2e        ] two and a half" in out and "[timed      ] three" in out
    assert "[integration] FAILED (exit 3)" in out and "[engine     ] passed" in out
    assert "[timed      ] passed" in out and "[unit       ] passed" in out
    # each phase starts only once the one before it has ended
    assert out.index("[engine     ] one") > out.index("[unit       ] passed")
    assert out.index("[timed      ] three") > max(out.index("[engine     ] passed"),
                                                  out.index("[integration] FAILED"), out.index("[e2e        ] passed"))


def test_both_halves_passing_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    monkeypatch.setattr(runner, "pytest", lambda *args: [sys.executable, "-c", "pass"])
    assert runner.run_in_phases([]) == 0
