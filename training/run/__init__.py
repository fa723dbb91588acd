"""The run: its set-up (`setup`), its output folder and lock (`folder`), its metrics log (`log`) and its
processes (`processes`: the process group, stop signals)."""
