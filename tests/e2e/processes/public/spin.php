<?php
// Spins for ?s= seconds, for the profiler.
require __DIR__ . '/../spin.php';
echo spin((float) ($_GET['s'] ?? 1));
