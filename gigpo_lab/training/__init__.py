"""The Lightning side of a run: ``GiGPOModule`` (one ``training_step`` = one iteration), the loss, the epoch's
iteration index, checkpoint plumbing, and the ``loss``/``trainer`` schemas. Import the modules themselves
(``gigpo_lab.training.module``); this package imports nothing, so that reading a schema stays cheap."""
