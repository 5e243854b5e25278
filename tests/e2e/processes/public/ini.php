<?php
// Names the process and one php.ini value: ?key=.
echo json_encode(['pid' => getmypid(), 'value' => ini_get($_GET['key'] ?? 'max_input_vars')]);
