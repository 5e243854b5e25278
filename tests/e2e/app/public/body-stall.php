<?php
// Reads the whole body, records whether PHP saw the connection abort, then answers.
$n = strlen(file_get_contents('php://input'));
file_put_contents($_GET['marker'], "read=$n aborted=" . connection_aborted());
echo "read $n bytes";
