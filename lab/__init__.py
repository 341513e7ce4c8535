"""Device and diagnosis scripts, one folder per question (README.md); outside the installed packages."""
