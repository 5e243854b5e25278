<?php
// Classic mode: fails where ?phase= says (script or shutdown) with ?kind=.
require __DIR__ . '/../fault.php';

$phase = $_GET['phase'] ?? '';
fault_in($phase === 'script' ? 'now' : $phase, $_GET['kind'] ?? '');
echo 'classic ok';
