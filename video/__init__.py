"""The video classifier family: tubelets, joint or factorised space-time attention, data and task."""
