"""The numbers of the Commander pod's rules that the compiled core and the record model share.

Spec: ``shared/docs/commander-pod.md`` and the Commander rules (903.x). The kernels
(``ml.game.commander.core.kernels``) freeze these values and check them at import; the
record model (``ml.game.commander.forge_record``) bounds its fields with them.
"""

from __future__ import annotations

STARTING_LIFE = 40
"""Commander starting life (shared/docs/commander-pod.md "Players and decks"; Commander rule 903.7)."""
HAND_SIZE = 7
"""Opening hand and end-of-turn maximum hand size (shared/docs/commander-pod.md "Turn")."""
COMMANDER_TAX_STEP = 2
"""Extra mana per previous cast of the commander from the command zone (Commander rule 903.8)."""
COMMANDER_DAMAGE_LETHAL = 21
"""Combat damage from a single commander that eliminates (Commander rule 903.10a)."""
