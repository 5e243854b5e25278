<?php
// Waits ?ms= milliseconds, then crashes its process the way ?how= says (pw_crash).
usleep((int) ($_GET['ms'] ?? 0) * 1000);
pw_crash($_GET['how'] ?? 'segv');
