"""Tuning: ``tune()`` drives propose ▶ build ▶ measure ▶ remember for one workload, with a
progress bar and a plot of the best speed by trial."""
from metasched.tune.target import host_target
from metasched.tune.tune import Trial, TuneResult, tune
from metasched.tune.warm_start import WARM_RECORDS, WarmStart

__all__ = ["Trial", "TuneResult", "WARM_RECORDS", "WarmStart", "host_target", "tune"]
