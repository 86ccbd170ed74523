"""SayNav's four prompts (Rajvanshi et al., Fig. 4, 5 and 8), rewritten in our own words.

Each keeps the paper's structure: the search-plan prompt gives rules and two in-context examples of
``- navigate; (x, y); comment`` / ``- look; (objects); comment`` lines, then the room's subgraph, the
goal and the base location; feasibility is a yes/no question about an object and a room type; room
identification picks a room type from a list given the objects seen; room tracking picks one of
three options (search, come back later, skip) given the room and what is still sought.
"""
from __future__ import annotations

SEARCH_PLAN = """You get a text description of one room of a house: the furniture in it, each with its 2D position.
I am standing in this room. Write a short step-by-step plan to reach the goal below, following these rules:
1. The only actions are (navigate, (x, y)) to walk to a position and (look, objects) to search for objects.
2. Small objects are found next to furniture, never just "in the room": look for an apple at the table, not in the kitchen.
3. Write one step per line, as "- action; argument; comment". Two examples:
a) Goal = 'Find a laptop', Base Location = 'LivingRoom'
- navigate; (3.4, 2.6); Walk to the CoffeeTable
- look; (laptop); Search for the laptop at the CoffeeTable
b) Goal = 'Find apple and bowl', Base Location = 'Kitchen'
- navigate; (3.4, 2.6); Walk to the DiningTable
- look; (apple, bowl); Search for the apple and the bowl at the DiningTable
- navigate; (8.32, 0.63); Walk to the CounterTop
- look; (apple, bowl); Search for the apple and the bowl at the CounterTop
4. Begin every line with - and do not number the lines.
5. Order the steps as a person would, using where such objects usually are.

Room description:
{room_graph}

Goal: {goal}
Base location: {base_location}
Plan:
"""

FEASIBILITY = """Answer the question with Yes or No.
Question: Is a {object} likely to be found in a {room_type}?
Answer:"""

ROOM_IDENTIFICATION = """Which kind of room is it? Choose from this list, based on the objects seen in it:
{room_types}
Answer with the room name as one word.
Objects seen: {object_list}
Room:"""

ROOM_TRACKING = """An agent searches a house room by room for some objects. For the room it is in, answer with one of:
- Search this room
- Come back later; Reason: none of the objects is likely to be in this room
- Skip this room; Reason: it was searched already
Rules: search a room where any object is likely; a room where none is likely and that is mentioned for the first
time: come back later; such a room that was marked to come back to before: search it; a room searched before: skip it.
'Bedroom 1' and 'Bedroom 2' are different rooms.
Example:
Objects: Apple, Laptop
Room: LivingRoom 1
- Search this room
Objects: Apple, Laptop
Room: Bathroom 2
- Come back later; Reason: none of the objects is likely to be in this room
Objects: Apple
Room: LivingRoom 1
- Skip this room; Reason: it was searched already
Objects: Apple
Room: Bathroom 2
- Search this room
{history}Objects: {objects}
Room: {room}
"""

TRACKING_OPTIONS = ("- Search this room", "- Come back later", "- Skip this room")
