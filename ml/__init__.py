"""distill-loop library: games, decision records, training, gate and the loop's orchestration.

Importing it caps the CPU's vector unit for torch, MKL, oneDNN and numpy at AVX2
(``ml.base.determinism``), before any of its modules imports them: results do not depend on the machine.
"""

from ml.base.determinism import cap_cpu

cap_cpu()
