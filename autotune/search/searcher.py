"""Ray Tune's OptunaSearch, taught constraints and the phase data a model-based sampler needs.

Ray's ``OptunaSearch.on_trial_complete`` only calls ``study.tell(value)``. Here the trial's
:class:`~autotune.search.trial_report.TrialReport` is told instead
(:meth:`~autotune.search.trial_report.TrialReport.tell`), so each Optuna trial gets:

- its constraint values (``<= 0`` is feasible): break-even (speculation must beat its baseline),
  each SLO, and "the config failed";
- user attrs with what the trial measured (phase profile, accept length, baseline), so samplers
  such as :class:`autotune.search.samplers.PhaseModelSampler` read results through Optuna's normal path.

A config that fails (OOM, crash) is a *result* with a violated constraint, so TPE learns from it.
Only infrastructure errors (a Ray worker lost) arrive with ``error=True`` and become FAIL.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from autotune.search.stopping import StopDecision, check, study_noise, turned_off
from autotune.search.trial_report import TrialReport

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

log = logging.getLogger(__name__)

class DefineByRun:
    """Picklable define-by-run function: the space's own ``suggest``."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        params = self.space.suggest(trial)
        return {k: v for k, v in params.items() if k not in trial.params}


class ConstrainedOptunaSearch(OptunaSearch):
    """``OptunaSearch`` that sets constraints and user attrs before telling Optuna, and ends the
    search through Ray's own path when the stop rule says so.

    Before each suggestion it asks :func:`autotune.search.stopping.check` (the sampler's bounds
    against the incumbent and the noise the trials' repeats measured); a stop returns
    ``Searcher.FINISHED``, so Tune starts no more trials, lets the running ones end, and the
    search concludes as after its last trial. :attr:`stop_decision` keeps the last decision.

    Args:
        sampler_name: The space's ``search.sampler`` (named by a rule that does not apply).
        budget: ``budget.trials`` (the cap; the rule's reason counts against it).
        stop_rule: ``search.stop_rule``: False runs the budget whatever the sampler.
        **kwargs: ``OptunaSearch``'s.
    """

    def __init__(self, *, sampler_name: str = "", budget: int = 0, stop_rule: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sampler_name = sampler_name
        self.budget = budget
        self.stop_rule = stop_rule
        self.stop_decision: StopDecision | None = None

    def suggest(self, trial_id: str) -> dict | None:
        if trial_id not in self._ot_trials and self._ot_study is not None:
            decision = self.decide()
            if decision.stop:
                log.info("%s", decision.reason)
                return Searcher.FINISHED  # Ray's sentinel: no more trials
        return super().suggest(trial_id)

    def decide(self) -> StopDecision:
        """The stop rule's decision now (kept in :attr:`stop_decision`)."""
        study = self.study
        done = sum(1 for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE)
        if not self.stop_rule:
            decision = turned_off(trials=done, budget=self.budget)
        else:
            decision = check(study.sampler, study, sampler_name=self.sampler_name,
                             noise=study_noise(study), trials=done, budget=self.budget)
        self.stop_decision = decision
        return decision

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # One final result per trial: nothing to report as an intermediate value.
        return None

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        if trial_id in self._completed_trials:
            return
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None:
            return
        report = TrialReport.from_metrics(result) if not error else None
        if report is None:
            super().on_trial_complete(trial_id, result=None, error=True)
            return
        try:
            report.tell(self.study, ot_trial, maximize=self._mode == "max")
        except Exception as exc:  # Optuna refuses a value: keep the search going, say why.
            log.warning("Optuna refused trial %s: %s", trial_id, exc)
        self._completed_trials.add(trial_id)

    @property
    def study(self) -> optuna.Study:
        if self._ot_study is None:
            raise ValueError("the searcher has no study yet")
        return self._ot_study


def study_storage(setting: str | None, *, root: Path) -> tuple[optuna.storages.BaseStorage | None, str | None]:
    """The Optuna storage ``search.storage`` names, and what ``optuna-dashboard`` opens.

    None: the study lives only in Ray's searcher (pickled in Ray's experiment state). ``sqlite``
    is ``<root>/mlruns/optuna.db``, ``journal`` ``<root>/mlruns/optuna.journal``, anything else an
    RDB URL; the search mirrors its study there (:func:`mirror_study`). Each search run is its own
    study (:func:`study_name`), so a new search of the same name never loads an earlier one's trials.
    """
    if setting is None:
        return None, None
    if setting == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        path = root / "mlruns" / "optuna.journal"
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path))), str(path)
    url = setting
    if setting == "sqlite":
        (root / "mlruns").mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{(root / 'mlruns' / 'optuna.db').resolve()}"
    return optuna.storages.RDBStorage(url), url


def study_name(search: str, run_name: str) -> str:
    """The Optuna study of one search run: ``<search name>/<Ray run dir>``."""
    return f"{search}/{run_name}"


def saved_searcher(exp_dir: Path) -> ConstrainedOptunaSearch:
    """The searcher Ray saved last in ``exp_dir``, with its study and its stop decision (after a
    resume the live one is inside the restored Tuner, out of the driver's reach).

    Raises:
        ValueError: No searcher with a study was saved there.
    """
    searcher = ConstrainedOptunaSearch()
    searcher.restore_from_dir(str(exp_dir))  # Ray pickles the searcher's __dict__: every attribute
    if searcher._ot_study is None:
        raise ValueError(f"no Optuna study was saved in {exp_dir}")
    return searcher


def mirror_study(study: optuna.Study, storage: optuna.storages.BaseStorage, name: str) -> int:
    """Write ``study`` to ``storage`` as study ``name``, replacing an earlier mirror of it.

    The searcher's own study is the truth: Ray restores it from its checkpoint on a resume, so
    trials asked or told after that checkpoint are forgotten there and asked again. A storage the
    searcher wrote to directly would keep those as stale RUNNING trials and first verdicts that
    Tune no longer has; a mirror written from the restored study agrees with Tune. Returns the
    number of trials written.
    """
    try:
        optuna.delete_study(study_name=name, storage=storage)
    except KeyError:
        pass
    mirror = optuna.create_study(storage=storage, study_name=name, directions=study.directions)
    for key, value in study.user_attrs.items():
        mirror.set_user_attr(key, value)
    trials = study.get_trials(deepcopy=False)
    mirror.add_trials(trials)
    return len(trials)


def mirror_and_say(study: optuna.Study | BaseException, store: optuna.storages.BaseStorage, name: str,
                   where: str | None, *, out: TextIO) -> None:
    """Write the searcher's study to ``search.storage`` and say where; a failure, or the error that
    kept the study from being read (given instead of it), is a warning (the search's results stand
    without the mirror)."""
    try:
        if isinstance(study, BaseException):
            raise study
        n = mirror_study(study, store, name)
        print(f"Optuna study {name!r} ({n} trials): optuna-dashboard {where}", file=out, flush=True)
    except Exception as exc:  # noqa: BLE001 - the search's results stand without the mirror
        print(f"warning: the Optuna study was not written to {where}: "
              f"{type(exc).__name__}: {exc}", file=out, flush=True)
