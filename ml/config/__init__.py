"""``params.yaml``: its pydantic models, read with file:line errors.

- ``yaml_file``: the one YAML library (ruamel.yaml, YAML 1.2), key lines, ``ParamsError``.
- ``sections``: one model per section (``game``, ``teacher``, ``train``, ``selfplay``, ...), each key documented.
- ``params``: the whole file (``Params``), its profiles and overrides, ``load_params``, the stage seeds.
- ``curriculum``: curriculum phases and abort rules.
"""
