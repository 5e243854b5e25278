<?php
// stores.php under a path that routes to the 'pair' worker of test_stores.py.
require __DIR__ . '/../stores.php';
