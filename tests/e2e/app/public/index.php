<?php
// Front controller: every request that is neither a script nor a file lands here.
header('Content-Type: text/plain');
echo 'front:', $_SERVER['REQUEST_URI'], '|', $_SERVER['SCRIPT_NAME'], '|', $_SERVER['PATH_INFO'];
