<?php return 'v1';
