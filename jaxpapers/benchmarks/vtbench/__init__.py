"""VT-Bench offline: visual-tabular tasks that need both modalities, fusion models, modality
diagnostics and a DVM-QA twin.

Contract names: :func:`vt_digits`, :func:`integrated_gradients`, :func:`mcr`. Modules:
``data`` (vt-digits and loaders for users' image + CSV folders and tfds), ``models`` (Flax
fusion models split into ``embed`` / ``head``, every task and seed trained in one program),
``diagnostics`` (MCR, integrated gradients), ``qa`` (the question-answering twin, its solvers
and an OpenAI-compatible VLM path).
"""

from jaxpapers.benchmarks.vtbench.data import (MISSING, VT_DIGITS_TASKS, VTData, from_tfds,
                                               load_image_table_folder, preprocess_table,
                                               vt_digits)
from jaxpapers.benchmarks.vtbench.diagnostics import (ig_modality_shares, ig_shares,
                                                      integrated_gradients,
                                                      integrated_gradients_batch, mcr)
from jaxpapers.benchmarks.vtbench.models import (MODELS, ModelConfig, predict_stacked,
                                                 train_models)

__all__ = ["MISSING", "VT_DIGITS_TASKS", "VTData", "vt_digits", "preprocess_table",
           "load_image_table_folder", "from_tfds", "integrated_gradients",
           "integrated_gradients_batch", "ig_shares", "ig_modality_shares", "mcr", "MODELS",
           "ModelConfig", "train_models", "predict_stacked"]
