"""After-the-fact analysis of finished runs, read back from MLflow: ``gigpo-lab compare``.

``runs`` chooses the runs (one sweep by default), ``configs`` groups them into configurations, ``stats``
holds the bootstrap estimators, ``summary`` computes each row, ``contrasts`` pairs configurations by seed
(statistics in ``paired``), ``report`` prints the tables and writes compare-<metric>.md, ``plots`` draws the
PNGs, and ``compare`` is the command. Writing runs stays in ``tracking``.
"""
