"""Inner Monologue's simulated tabletop (PyBullet, Franka Panda). Needs ``pip install 'groundplan[tabletop]'``."""
