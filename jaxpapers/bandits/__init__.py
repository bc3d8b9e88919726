"""Contextual slate GLM bandits with limited adaptivity (B-SlateGLinCB, RS-SlateGLinCB) and
baselines (Slate-GLM-OFU, Slate-GLM-TS, random), with environments and a scan/vmap runner."""

from jaxpapers.bandits._types import RunResult, SlateAlgo
from jaxpapers.bandits.b_slateglincb import (BState, batch_bound, batch_schedule,
                                             make_b_slateglincb)
from jaxpapers.bandits.env import (SlateEnv, env_contexts, env_mean_reward, env_sample_reward,
                                   kappa_of, make_slate_env, make_slate_env_from_pool,
                                   oracle_slate, slate_features)
from jaxpapers.bandits.flatten import MAX_FLAT_ARMS, flatten_slates, slate_index_table
from jaxpapers.bandits.glm import LOGISTIC, PROBIT, Link, fit_glm_mle, get_link, glm_nll
from jaxpapers.bandits.random_policy import make_random
from jaxpapers.bandits.rs_slateglincb import (RSState, make_rs_slateglincb, rs_switch_bound,
                                              rs_warmup_threshold)
from jaxpapers.bandits.runner import run_bandit, run_bandit_seeds
from jaxpapers.bandits.slate_glm_ofu import OFUState, make_slate_glm_ofu
from jaxpapers.bandits.slate_glm_ts import make_slate_glm_ts

__all__ = [
    "BState", "LOGISTIC", "MAX_FLAT_ARMS", "flatten_slates", "slate_index_table", "Link", "OFUState", "PROBIT", "RSState", "RunResult", "SlateAlgo",
    "SlateEnv", "batch_bound", "batch_schedule", "env_contexts", "env_mean_reward",
    "env_sample_reward", "fit_glm_mle", "get_link", "glm_nll", "kappa_of", "make_b_slateglincb",
    "make_random", "make_rs_slateglincb", "make_slate_env", "make_slate_env_from_pool",
    "make_slate_glm_ofu", "make_slate_glm_ts", "oracle_slate", "rs_switch_bound",
    "rs_warmup_threshold", "run_bandit", "run_bandit_seeds", "slate_features",
]
