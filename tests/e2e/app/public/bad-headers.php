<?php
// Header names and values PHP accepts but HTTP does not.
header('Bad Name: x');
header('Bad' . chr(1) . 'Ctl: y');
header('X-Ctl-Value: a' . chr(1) . 'b');
header('X-Fine: kept');
echo 'body';
