"""The class's rules, beside the store that keeps its data: who may do what, quotas, exercises and their deadlines,
submissions, boards, exports, similarity and trajectories. Plain Python, no Gradio: the page
(playground/ui/classroom.py) and the API call it."""
from .access import (CLASS_LOGIN, LOGIN_SEEN, NAME_LIMIT, TEACHER, TEACHER_LOGIN, Recent, client_address, error,
                     in_networks, resolve_client, spreadsheet_safe, user_name)
from .exercises import EXERCISES_DIR, Exercise, ExerciseError, label, load_exercise, load_exercises
from .room import Classroom
from .submitting import NO_GPU

__all__ = ["CLASS_LOGIN", "LOGIN_SEEN", "NAME_LIMIT", "TEACHER", "TEACHER_LOGIN", "Recent", "client_address", "error",
           "in_networks", "resolve_client", "spreadsheet_safe", "user_name", "EXERCISES_DIR", "Exercise",
           "ExerciseError", "label", "load_exercise", "load_exercises", "Classroom", "NO_GPU"]
