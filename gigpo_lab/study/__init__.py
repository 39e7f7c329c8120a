"""Pre-registered studies: a spec (``spec.py``) that ``gigpo-lab study`` plans, registers, runs, resumes and
judges (``cli.py``), with one reader of rows (``rows.py``) and the lab's one contrast engine
(``gigpo_lab.analysis.engine``)."""
