"""Nsight Compute reports: ``extract`` runs NVIDIA's ``ncu_report`` in a child process and
``report.NcuReport`` builds the frames from what it saved."""
