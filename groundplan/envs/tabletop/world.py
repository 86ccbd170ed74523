"""The simulated tabletop of Inner Monologue (Huang et al. 2022, Sec. 4.1 / App. A.1) in PyBullet.

Ravens-style scene: up to 4 blocks and 3 bowls in 10 named colours on a table, 9 named locations
(4 corners, 4 sides, middle), objects at least 15 cm apart, layouts seeded. A Franka Panda (from
``pybullet_data``) runs one scripted pick-and-place primitive with inverse kinematics under real
physics.

Grasping choice (documented, as the issue allows): the Panda's parallel fingers close on the block
under position control, and — only when a finger is actually in contact with the block — a fixed
constraint is added between the hand and the block at their *current* relative pose (the
"suction-style" grasp of Ravens). Friction grasps of 4 cm blocks with PyBullet's default contact
model slip while the arm accelerates; the constraint makes carrying reliable while the object still
moves only through the physics (arm motion → constraint forces). It is removed at release, and the
block falls the last millimetres under gravity. After the initial layout nothing is ever teleported:
``resetBasePositionAndOrientation`` is called only by :meth:`TabletopWorld.build` (tests spy on it).

Every PyBullet call passes ``physicsClientId``: each :class:`TabletopWorld` owns one DIRECT client,
so many worlds run side by side in one process.

Frame conventions: the robot base is at the origin, +x points away from the robot. In the top-down
image the far edge of the table is the top ("top side"), +y is the left ("left side").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pybullet as pb
import pybullet_data

# ------------------------------------------------------------------------------------ constants
#: Ravens' colour palette (the 10 colours of IM's sim tabletop)
COLOURS: dict[str, tuple[float, float, float]] = {
    "blue": (0.306, 0.475, 0.655),
    "red": (0.882, 0.341, 0.349),
    "green": (0.349, 0.631, 0.310),
    "orange": (0.949, 0.557, 0.169),
    "yellow": (0.929, 0.788, 0.282),
    "purple": (0.690, 0.478, 0.631),
    "pink": (1.000, 0.616, 0.655),
    "cyan": (0.463, 0.718, 0.698),
    "brown": (0.612, 0.459, 0.373),
    "gray": (0.729, 0.690, 0.675),
}
COLOUR_NAMES: tuple[str, ...] = tuple(COLOURS)

#: workspace on the table (metres, robot frame)
X_RANGE = (0.20, 0.70)
Y_RANGE = (-0.30, 0.30)
_XS = {"top": 0.65, "middle": 0.45, "bottom": 0.25}
_YS = {"left": 0.25, "middle": 0.0, "right": -0.25}
#: the 9 named locations, at the centre of each cell of a 3x3 grid over the workspace
LOCATIONS: dict[str, tuple[float, float]] = {
    "top left corner": (_XS["top"], _YS["left"]),
    "top side": (_XS["top"], _YS["middle"]),
    "top right corner": (_XS["top"], _YS["right"]),
    "left side": (_XS["middle"], _YS["left"]),
    "middle": (_XS["middle"], _YS["middle"]),
    "right side": (_XS["middle"], _YS["right"]),
    "bottom left corner": (_XS["bottom"], _YS["left"]),
    "bottom side": (_XS["bottom"], _YS["middle"]),
    "bottom right corner": (_XS["bottom"], _YS["right"]),
}
CORNERS: tuple[str, ...] = tuple(n for n in LOCATIONS if n.endswith("corner"))
SIDES: tuple[str, ...] = tuple(n for n in LOCATIONS if n.endswith("side"))

BLOCK_HALF = 0.02  # 4 cm cubes
BLOCK_MASS = 0.05
BOWL_RADIUS = 0.075  # inner radius of the bowl's floor
BOWL_FLOOR = 0.01  # thickness of the floor
BOWL_WALL_HEIGHT = 0.035
MIN_SEPARATION = 0.15  # IM: objects at least 15 cm apart
MAX_BLOCKS, MAX_BOWLS = 4, 3

PANDA_ARM_JOINTS = list(range(7))
PANDA_FINGERS = (9, 10)
PANDA_EE_LINK = 11  # panda_grasptarget, between the fingertips
PANDA_HAND_LINKS = (8, 9, 10, 11)
PANDA_REST = [0.0, -0.35, 0.0, -2.3, 0.0, 1.95, 0.785]  # IK null-space rest pose
#: retracted joint configuration: the hand sits above the robot's base, outside the top camera's view of the workspace
PANDA_HOME = [0.0, -1.2, 0.0, -2.9, 0.0, 1.8, 0.785]
FINGER_OPEN, FINGER_CLOSED = 0.04, 0.0
DOWN = pb.getQuaternionFromEuler([math.pi, 0.0, 0.0])
HOVER_Z = 0.20


def block_name(colour: str) -> str:
    return f"{colour} block"


def bowl_name(colour: str) -> str:
    return f"{colour} bowl"


def is_block(name: str) -> bool:
    return name.endswith(" block")


def is_bowl(name: str) -> bool:
    return name.endswith(" bowl")


@dataclass(frozen=True)
class Layout:
    """Initial scene: object name → (x, y) on the table; blocks and bowls in insertion order."""

    blocks: tuple[str, ...]
    bowls: tuple[str, ...]
    xy: dict[str, tuple[float, float]] = field(default_factory=dict)


def sample_layout(
    rng: np.random.Generator,
    n_blocks: int,
    n_bowls: int,
    block_colours: Sequence[str] | None = None,
    bowl_colours: Sequence[str] | None = None,
    min_separation: float = MIN_SEPARATION,
) -> Layout:
    """A seeded layout: colours (distinct within each kind unless given) and positions ≥ ``min_separation``
    apart (rejection sampling with restarts)."""
    if not (1 <= n_blocks <= MAX_BLOCKS and 0 <= n_bowls <= MAX_BOWLS):
        raise ValueError(f"need 1-{MAX_BLOCKS} blocks and 0-{MAX_BOWLS} bowls, got {n_blocks}, {n_bowls}")
    blocks = list(block_colours) if block_colours else list(rng.choice(COLOUR_NAMES, n_blocks, replace=False))
    bowls = list(bowl_colours) if bowl_colours is not None else list(rng.choice(COLOUR_NAMES, n_bowls, replace=False))
    names = [block_name(c) for c in blocks] + [bowl_name(c) for c in bowls]
    margin = 0.04
    for _ in range(200):
        points: list[tuple[float, float]] = []
        for name in names:
            extra = 0.03 if is_bowl(name) else 0.0
            for _ in range(200):
                p = (float(rng.uniform(X_RANGE[0] + margin + extra, X_RANGE[1] - margin - extra)),
                     float(rng.uniform(Y_RANGE[0] + margin + extra, Y_RANGE[1] - margin - extra)))
                if all(math.dist(p, q) >= min_separation for q in points):
                    points.append(p)
                    break
            else:
                break
        if len(points) == len(names):
            return Layout(tuple(block_name(c) for c in blocks), tuple(bowl_name(c) for c in bowls), dict(zip(names, points)))
    raise RuntimeError("could not place the objects 15 cm apart; use fewer objects")


# ------------------------------------------------------------------------------------ the world
@dataclass
class PickPlaceResult:
    grasped: bool
    released: bool
    pick_xy: tuple[float, float]
    place_xyz: tuple[float, float, float]
    sim_steps: int
    note: str = ""


class TabletopWorld:
    """One PyBullet DIRECT client with a plane, a Panda, blocks and bowls."""

    def __init__(self, time_step: float = 1.0 / 240.0) -> None:
        self.cid = pb.connect(pb.DIRECT)
        self.time_step = time_step
        self.ids: dict[str, int] = {}
        self.names: dict[int, str] = {}
        self.robot = -1
        self._grasp_constraint: int | None = None
        self._held: str | None = None
        self.sim_steps = 0
        self._bowl_shapes: tuple[int, int] | None = None

    # -------------------------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if self.cid >= 0:
            try:
                pb.disconnect(physicsClientId=self.cid)
            except pb.error:
                pass
            self.cid = -1

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def build(self, layout: Layout) -> None:
        """(Re)create the scene for ``layout``; the only place object poses are set directly."""
        c = self.cid
        pb.resetSimulation(physicsClientId=c)
        pb.setGravity(0, 0, -9.81, physicsClientId=c)
        pb.setTimeStep(self.time_step, physicsClientId=c)
        pb.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=c)
        self.ids, self.names = {}, {}
        self._grasp_constraint, self._held = None, None
        self._bowl_shapes = None
        plane = pb.loadURDF("plane.urdf", [0, 0, 0], physicsClientId=c)
        pb.changeVisualShape(plane, -1, rgbaColor=[0.85, 0.83, 0.78, 1], textureUniqueId=-1, physicsClientId=c)
        self.robot = pb.loadURDF("franka_panda/panda.urdf", [0, 0, 0], useFixedBase=True, physicsClientId=c)
        for j, q in zip(PANDA_ARM_JOINTS, PANDA_HOME):  # the robot's initial configuration (not an object)
            pb.resetJointState(self.robot, j, q, physicsClientId=c)
        for j in PANDA_FINGERS:
            pb.resetJointState(self.robot, j, FINGER_OPEN, physicsClientId=c)
            pb.changeDynamics(self.robot, j, lateralFriction=1.5, physicsClientId=c)
        self._hold_arm(PANDA_HOME)
        self._set_fingers(FINGER_OPEN)
        block_col = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[BLOCK_HALF] * 3, physicsClientId=c)
        for name in layout.blocks:
            colour = name.split()[0]
            vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=[BLOCK_HALF] * 3, rgbaColor=[*COLOURS[colour], 1],
                                       physicsClientId=c)
            x, y = layout.xy[name]
            body = pb.createMultiBody(BLOCK_MASS, block_col, vis, [x, y, BLOCK_HALF], physicsClientId=c)
            pb.changeDynamics(body, -1, lateralFriction=0.8, physicsClientId=c)
            self._add(name, body)
        for name in layout.bowls:
            colour = name.split()[0]
            x, y = layout.xy[name]
            body = self._make_bowl([x, y, 0.0], COLOURS[colour])
            self._add(name, body)
        for _ in range(30):  # let contacts settle
            self.step()

    def _add(self, name: str, body: int) -> None:
        self.ids[name] = body
        self.names[body] = name

    def _make_bowl(self, pos: Sequence[float], rgb: Sequence[float]) -> int:
        """A static bowl: a floor disc (the base) and a ring of 16 wall boxes (fixed links)."""
        c = self.cid
        n = 16
        wall_half = [0.006, BOWL_RADIUS * math.tan(math.pi / n) + 0.004, BOWL_WALL_HEIGHT / 2]
        rgba = [*rgb, 1]
        floor_col = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=BOWL_RADIUS + 0.006, height=BOWL_FLOOR,
                                            collisionFramePosition=[0, 0, BOWL_FLOOR / 2], physicsClientId=c)
        floor_vis = pb.createVisualShape(pb.GEOM_CYLINDER, radius=BOWL_RADIUS + 0.006, length=BOWL_FLOOR,
                                         visualFramePosition=[0, 0, BOWL_FLOOR / 2], rgbaColor=rgba,
                                         physicsClientId=c)
        wall_col = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=wall_half, physicsClientId=c)
        wall_vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=wall_half, rgbaColor=rgba, physicsClientId=c)
        positions, orients = [], []
        for k in range(n):
            a = 2 * math.pi * k / n
            r = BOWL_RADIUS + wall_half[0]
            positions.append([r * math.cos(a), r * math.sin(a), BOWL_WALL_HEIGHT / 2])
            orients.append(pb.getQuaternionFromEuler([0, 0, a]))
        return pb.createMultiBody(
            0, floor_col, floor_vis, list(pos),
            linkMasses=[0.0] * n, linkCollisionShapeIndices=[wall_col] * n, linkVisualShapeIndices=[wall_vis] * n,
            linkPositions=positions, linkOrientations=orients, linkInertialFramePositions=[[0, 0, 0]] * n,
            linkInertialFrameOrientations=[[0, 0, 0, 1]] * n, linkParentIndices=[0] * n,
            linkJointTypes=[pb.JOINT_FIXED] * n, linkJointAxis=[[0, 0, 1]] * n, physicsClientId=c)

    # -------------------------------------------------------------------------------- state
    def position(self, name: str) -> tuple[float, float, float]:
        pos, _ = pb.getBasePositionAndOrientation(self.ids[name], physicsClientId=self.cid)
        return (float(pos[0]), float(pos[1]), float(pos[2]))

    def positions(self) -> dict[str, tuple[float, float, float]]:
        return {name: self.position(name) for name in self.ids}

    def ee_position(self) -> np.ndarray:
        return np.array(pb.getLinkState(self.robot, PANDA_EE_LINK, physicsClientId=self.cid)[4])

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            pb.stepSimulation(physicsClientId=self.cid)
        self.sim_steps += n

    # -------------------------------------------------------------------------------- control
    def _hold_arm(self, q: Sequence[float]) -> None:
        pb.setJointMotorControlArray(self.robot, PANDA_ARM_JOINTS, pb.POSITION_CONTROL, targetPositions=list(q),
                                     forces=[200.0] * 7, positionGains=[0.3] * 7, physicsClientId=self.cid)

    def _set_fingers(self, width: float, force: float = 40.0) -> None:
        pb.setJointMotorControlArray(self.robot, list(PANDA_FINGERS), pb.POSITION_CONTROL,
                                     targetPositions=[width, width], forces=[force, force], physicsClientId=self.cid)

    def _ik(self, target: Sequence[float]) -> list[float]:
        q = pb.calculateInverseKinematics(
            self.robot, PANDA_EE_LINK, list(target), DOWN,
            lowerLimits=[-2.9, -1.76, -2.9, -3.07, -2.9, -0.02, -2.9], upperLimits=[2.9, 1.76, 2.9, -0.07, 2.9, 3.75, 2.9],
            jointRanges=[5.8, 3.5, 5.8, 3.0, 5.8, 3.8, 5.8], restPoses=PANDA_REST,
            maxNumIterations=50, residualThreshold=1e-4, physicsClientId=self.cid,
        )
        return list(q[:7])

    def move_to(self, target: Sequence[float], speed: float = 0.6, stop_on_contact: int | None = None,
                max_settle: int = 60) -> bool:
        """Move the grasp point in a straight line to ``target`` at ``speed`` m/s (IK each step).
        With ``stop_on_contact`` (a body id), stop as soon as that body touches anything other than the
        robot. Returns True when a contact stopped the motion."""
        start = self.ee_position()
        goal = np.asarray(target, dtype=float)
        dist = float(np.linalg.norm(goal - start))
        n = max(1, int(math.ceil(dist / (speed * self.time_step))))
        for k in range(1, n + 1):
            self._hold_arm(self._ik(start + (goal - start) * k / n))
            self.step()
            if stop_on_contact is not None and self._touching(stop_on_contact):
                return True
        q = self._ik(goal)
        self._hold_arm(q)
        for _ in range(max_settle):  # settle until the grasp point is within 5 mm
            self.step()
            if stop_on_contact is not None and self._touching(stop_on_contact):
                return True
            if np.linalg.norm(self.ee_position() - goal) < 0.005:
                break
        return False

    def go_home(self, joint_speed: float = 2.0) -> None:
        """Joint-space move to :data:`PANDA_HOME` (IK from there reaches the whole workspace)."""
        q0 = np.array([s[0] for s in pb.getJointStates(self.robot, PANDA_ARM_JOINTS, physicsClientId=self.cid)])
        q1 = np.array(PANDA_HOME)
        n = max(1, int(math.ceil(np.abs(q1 - q0).max() / (joint_speed * self.time_step))))
        for k in range(1, n + 1):
            self._hold_arm(q0 + (q1 - q0) * k / n)
            self.step()

    def _touching(self, body: int) -> bool:
        for cp in pb.getContactPoints(bodyA=body, physicsClientId=self.cid):
            if cp[2] != self.robot and cp[2] != body:
                return True
        return False

    def _fingers_touch(self, body: int) -> bool:
        return any(
            pb.getContactPoints(bodyA=self.robot, bodyB=body, linkIndexA=link, physicsClientId=self.cid)
            for link in PANDA_HAND_LINKS
        )

    def pick_and_place(self, obj: str, pick_xy: Sequence[float], place_xyz: Sequence[float],
                       grasp_z: float | None = None) -> PickPlaceResult:
        """Scripted primitive: hover over ``pick_xy``, descend, close the fingers, attach on contact, lift,
        carry to above ``place_xyz``, descend until the held block touches something (or the height is
        reached), release, retreat. ``place_xyz`` is where the block's centre should end up. ``grasp_z``
        is the height of the grasp point at the pick (default: 5 mm below the object's centre); thin
        objects on a stack (Hanoi disks) need it higher so the fingertips miss the one below."""
        c = self.cid
        steps0 = self.sim_steps
        body = self.ids[obj]
        obj_z = self.position(obj)[2]
        px, py = float(pick_xy[0]), float(pick_xy[1])
        self._set_fingers(FINGER_OPEN)
        self.move_to([px, py, HOVER_Z], speed=0.8)
        self.move_to([px, py, max(obj_z - 0.005, 0.012) if grasp_z is None else grasp_z], speed=0.4)
        self._set_fingers(FINGER_CLOSED)
        self.step(40)
        grasped = self._fingers_touch(body)
        if grasped:
            hand_pos, hand_orn = pb.getLinkState(self.robot, PANDA_EE_LINK, physicsClientId=c)[4:6]
            obj_pos, obj_orn = pb.getBasePositionAndOrientation(body, physicsClientId=c)
            inv_pos, inv_orn = pb.invertTransform(hand_pos, hand_orn)
            rel_pos, rel_orn = pb.multiplyTransforms(inv_pos, inv_orn, obj_pos, obj_orn)
            self._grasp_constraint = pb.createConstraint(
                self.robot, PANDA_EE_LINK, body, -1, pb.JOINT_FIXED, [0, 0, 0], rel_pos, [0, 0, 0],
                parentFrameOrientation=rel_orn, physicsClientId=c)
            pb.changeConstraint(self._grasp_constraint, maxForce=50.0, physicsClientId=c)
            self._held = obj
        self.move_to([px, py, HOVER_Z], speed=0.6)
        tx, ty, tz = (float(v) for v in place_xyz)
        self.move_to([tx, ty, HOVER_Z], speed=0.8)
        if grasped:
            offset = self.ee_position()[2] - self.position(obj)[2]  # grasp point above block centre
            self.move_to([tx, ty, tz + offset + 0.01], speed=0.3, stop_on_contact=body)
        self._release()
        self.step(20)
        self.move_to([tx, ty, HOVER_Z], speed=0.6)
        self.go_home()  # out of the top camera's view of the workspace
        self.step(10)  # let the released block settle before anyone looks
        return PickPlaceResult(grasped, grasped, (px, py), (tx, ty, tz), self.sim_steps - steps0,
                               "" if grasped else "nothing grasped")

    def _release(self) -> None:
        if self._grasp_constraint is not None:
            pb.removeConstraint(self._grasp_constraint, physicsClientId=self.cid)
            self._grasp_constraint, self._held = None, None
        self._set_fingers(FINGER_OPEN)

    def knock(self, obj: str, direction: Sequence[float], force: float = 1.6, steps: int = 10) -> None:
        """Disturbance: push ``obj`` sideways with an external force for ``steps`` physics steps, then let
        it come to rest (a physical knock, not a teleport)."""
        body = self.ids[obj]
        d = np.asarray(direction, dtype=float)
        d = d / (np.linalg.norm(d) + 1e-9)
        for _ in range(steps):
            pos = self.position(obj)
            pb.applyExternalForce(body, -1, [force * d[0], force * d[1], 0.15], pos, pb.WORLD_FRAME,
                                  physicsClientId=self.cid)
            self.step()
        self.step(120)

    # -------------------------------------------------------------------------------- cameras
    def render(self, camera: str, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """RGB (uint8 HxWx3), depth (float32 metres) and segmentation (int32 body ids) from a camera:
        ``"top"`` (top-down over the workspace, far side up, +y left) or ``"front"``."""
        if camera == "top":
            eye, target, up = [0.45, 0.0, 1.0], [0.45, 0.0, 0.0], [1.0, 0.0, 0.0]
            fov, near, far = 40.0, 0.1, 2.0
        elif camera == "front":
            eye, target, up = [1.35, 0.0, 0.55], [0.45, 0.0, 0.05], [0.0, 0.0, 1.0]
            fov, near, far = 45.0, 0.1, 3.0
        else:
            raise ValueError(f"unknown camera '{camera}' (top, front)")
        view = pb.computeViewMatrix(eye, target, up, physicsClientId=self.cid)
        proj = pb.computeProjectionMatrixFOV(fov, width / height, near, far, physicsClientId=self.cid)
        _, _, rgba, depth_buf, seg = pb.getCameraImage(width, height, view, proj, renderer=pb.ER_TINY_RENDERER,
                                                       physicsClientId=self.cid)
        rgb = np.asarray(rgba, dtype=np.uint8).reshape(height, width, 4)[:, :, :3]
        depth_buf = np.asarray(depth_buf, dtype=np.float32).reshape(height, width)
        depth = far * near / (far - (far - near) * depth_buf)
        seg = np.asarray(seg, dtype=np.int32).reshape(height, width)
        return rgb, depth.astype(np.float32), seg

    def info(self) -> dict[str, Any]:
        return {"client": self.cid, "bodies": pb.getNumBodies(physicsClientId=self.cid)}
