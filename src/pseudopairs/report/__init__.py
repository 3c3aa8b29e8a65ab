"""The report stage: the paper's tables (:mod:`~pseudopairs.report.tables`), Figure 1 and the
training curves (:mod:`~pseudopairs.report.figures`), the §7.2 statistics step and its plots
(:mod:`~pseudopairs.report.pseudopair_stats`), the rounds' summary
(:mod:`~pseudopairs.report.rounds_summary`)."""
